#include "quant/gptoss.h"

#include <cstring>

#include "core/error.h"

namespace mx {

Tensor gptoss_expert(const Tensor& blocks, const Tensor& scales, int64_t e) {
  MX_CHECK(blocks.dtype == DType::U8 && scales.dtype == DType::U8, "gpt-oss MXFP4 blocks and scales must be U8");
  MX_CHECK(blocks.ndim == 4 && blocks.dim(3) == 16 && scales.ndim == 3, "gpt-oss blocks must be [E, rows, K/32, 16] "
           "and scales [E, rows, K/32], got {} and {}", blocks.shape_str(), scales.shape_str());
  MX_CHECK(scales.dim(0) == blocks.dim(0) && scales.dim(1) == blocks.dim(1) && scales.dim(2) == blocks.dim(2),
           "gpt-oss scales {} do not match blocks {}", scales.shape_str(), blocks.shape_str());
  MX_CHECK(e >= 0 && e < blocks.dim(0), "expert {} out of range [0, {})", e, blocks.dim(0));
  const int64_t rows = blocks.dim(1), nb = blocks.dim(2);
  Tensor t(DType::MXFP4, {rows, nb * 32}, static_cast<uint8_t*>(blocks.data) + e * rows * nb * 16);
  t.scales = static_cast<const uint8_t*>(scales.data) + e * rows * nb;
  return t;
}

GateUp split_gate_up(const Tensor& gu) {
  MX_CHECK(gu.dtype == DType::MXFP4 && gu.scales && gu.dim(0) % 2 == 0, "split_gate_up needs MXFP4 [2I, H]");
  const int64_t I = gu.dim(0) / 2, H = gu.dim(1);
  GateUp r;
  r.gate_data = OwnedTensor::make(DType::U8, {I, H / 2});
  r.up_data = OwnedTensor::make(DType::U8, {I, H / 2});
  r.gate_scales = OwnedTensor::make(DType::U8, {I, H / 32});
  r.up_scales = OwnedTensor::make(DType::U8, {I, H / 32});
  const auto* d = static_cast<const uint8_t*>(gu.data);
  const auto* s = static_cast<const uint8_t*>(gu.scales);
  for (int64_t k = 0; k < I; ++k) {
    std::memcpy(r.gate_data.t.as<uint8_t>() + k * H / 2, d + (2 * k) * H / 2, H / 2);
    std::memcpy(r.up_data.t.as<uint8_t>() + k * H / 2, d + (2 * k + 1) * H / 2, H / 2);
    std::memcpy(r.gate_scales.t.as<uint8_t>() + k * H / 32, s + (2 * k) * H / 32, H / 32);
    std::memcpy(r.up_scales.t.as<uint8_t>() + k * H / 32, s + (2 * k + 1) * H / 32, H / 32);
  }
  r.gate = Tensor(DType::MXFP4, {I, H}, r.gate_data.t.data);
  r.gate.scales = r.gate_scales.t.data;
  r.up = Tensor(DType::MXFP4, {I, H}, r.up_data.t.data);
  r.up.scales = r.up_scales.t.data;
  return r;
}

}  // namespace mx
