#include "quant/dequantize.h"

#include "core/error.h"
#include "quant/mxfp4.h"

namespace mx {

OwnedTensor dequantize_f32(const Tensor& w) {
  MX_CHECK(w.ndim == 2, "dequantize: tensor of rank {} (2 expected)", w.ndim);
  const int64_t rows = w.dim(0), cols = w.dim(1);
  OwnedTensor o = OwnedTensor::make(DType::F32, {rows, cols});
  float* out = o.t.as<float>();
  if (w.dtype == DType::MXFP4) {
    MX_CHECK(w.scales && cols % 32 == 0, "dequantize: MXFP4 tensor without scales or cols % 32 != 0");
    const auto* packed = static_cast<const uint8_t*>(w.data);
    const auto* scales = static_cast<const uint8_t*>(w.scales);
    for (int64_t r = 0; r < rows; ++r)
      mxfp4::dequantize_row(packed + r * cols / 2, scales + r * cols / 32, cols, out + r * cols);
    return o;
  }
  const int64_t sc_cols = (cols + 127) / 128;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float v = load_as_f32(w.data, w.dtype, r * cols + c);
      if (w.dtype == DType::F8_E4M3 && w.scales)
        v *= static_cast<const float*>(w.scales)[(r / 128) * sc_cols + c / 128];
      out[r * cols + c] = v;
    }
  return o;
}

}  // namespace mx
