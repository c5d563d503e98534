#include "comm/shard.h"

#include <cstring>

#include "core/error.h"

namespace mx {

int ShardPlan::part(int n, const char* what) const {
  MX_CHECK(n % size == 0, "cannot split {} {} over {} ranks evenly", n, what, size);
  return n / size;
}

std::string ShardPlan::describe() const {
  if (!active()) return "unsharded";
  return fmt::format("rank {}/{}{}{}", rank, size, tp ? " tp" : "", ep ? " ep" : "");
}

Tensor slice_rows(const Tensor& w, int64_t r0, int64_t n) {
  if (w.empty()) return w;
  MX_CHECK(w.ndim == 2 && r0 >= 0 && n > 0 && r0 + n <= w.shape[0], "slice_rows [{}, +{}) of {}", r0, n,
           w.shape_str());
  const int64_t cols = w.shape[1];
  Tensor t(w.dtype, {n, cols}, static_cast<char*>(w.data) + dtype_bytes(w.dtype, r0 * cols));
  if (w.scales) {
    if (w.dtype == DType::MXFP4) {
      t.scales = static_cast<const uint8_t*>(w.scales) + r0 * (cols / 32);
    } else {
      MX_CHECK(w.dtype == DType::F8_E4M3, "slice_rows: unexpected scaled dtype {}", dtype_name(w.dtype));
      MX_CHECK(r0 % 128 == 0 && (n % 128 == 0 || r0 + n == w.shape[0]),
               "tensor parallel: FP8 rows [{}, +{}) are not aligned to the 128-row scale blocks", r0, n);
      t.scales = static_cast<const float*>(w.scales) + (r0 / 128) * ((cols + 127) / 128);
    }
  }
  return t;
}

Tensor WeightSlice::shape() const {
  if (empty()) return {};
  Tensor t(whole.dtype, {whole.shape[0], cols}, whole.data);
  t.scales = whole.scales;
  return t;
}

WeightSlice slice_cols(const Tensor& w, int64_t c0, int64_t n) {
  if (w.empty()) return {};
  MX_CHECK(w.ndim == 2 && c0 >= 0 && n > 0 && c0 + n <= w.shape[1], "slice_cols [{}, +{}) of {}", c0, n,
           w.shape_str());
  if (w.dtype == DType::MXFP4)
    MX_CHECK(c0 % 32 == 0 && n % 32 == 0, "tensor parallel: MXFP4 columns [{}, +{}) not aligned to 32", c0, n);
  if (w.dtype == DType::F8_E4M3 && w.scales)
    MX_CHECK(c0 % 128 == 0 && (n % 128 == 0 || c0 + n == w.shape[1]),
             "tensor parallel: FP8 columns [{}, +{}) not aligned to the 128-column scale blocks", c0, n);
  WeightSlice s(w);
  s.c0 = c0, s.cols = n;
  return s;
}

Tensor copy_cols(const WeightSlice& s, OwnedTensor& own, Buffer& own_scales) {
  if (!s.sliced()) return s.whole;
  const Tensor& w = s.whole;
  const int64_t rows = w.shape[0], cols = w.shape[1], c0 = s.c0, n = s.cols;
  own = OwnedTensor::make(w.dtype, {rows, n});
  const size_t row_bytes = dtype_bytes(w.dtype, cols), off = dtype_bytes(w.dtype, c0),
               len = dtype_bytes(w.dtype, n);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<char*>(own.t.data) + r * len, static_cast<const char*>(w.data) + r * row_bytes + off, len);
  Tensor t = own.t;
  if (w.scales && w.dtype == DType::MXFP4) {
    const int64_t sc = cols / 32, sn = n / 32;
    own_scales = Buffer(size_t(rows) * sn);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<char*>(own_scales.data()) + r * sn,
                  static_cast<const uint8_t*>(w.scales) + r * sc + c0 / 32, sn);
    t.scales = own_scales.data();
  } else if (w.scales && w.dtype == DType::F8_E4M3) {
    const int64_t rb = (rows + 127) / 128, cb = (cols + 127) / 128, nb = (n + 127) / 128;
    own_scales = Buffer(size_t(rb) * nb * 4);
    for (int64_t r = 0; r < rb; ++r)
      std::memcpy(static_cast<float*>(own_scales.data()) + r * nb,
                  static_cast<const float*>(w.scales) + r * cb + c0 / 128, nb * 4);
    t.scales = own_scales.data();
  }
  return t;
}

Tensor slice_vec(const Tensor& v, int64_t i0, int64_t n) {
  if (v.empty()) return v;
  MX_CHECK(v.ndim == 1 && i0 >= 0 && i0 + n <= v.shape[0], "slice_vec [{}, +{}) of {}", i0, n, v.shape_str());
  return Tensor(v.dtype, {n}, static_cast<char*>(v.data) + dtype_bytes(v.dtype, i0));
}

}  // namespace mx
