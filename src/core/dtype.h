#pragma once
// Element types of weights and activations, and scalar conversions between them.
// MXFP4 is a packed format: 4-bit elements, with E8M0 block scales held beside
// the data (Tensor::scales; quant/mxfp4.h), which is why sizes are in bits.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "core/float_formats.h"

namespace mx {

enum class DType : uint8_t { F32, F16, BF16, F8_E4M3, U8, I8, I16, I32, I64, BOOL, MXFP4 };

int dtype_bits(DType t);
inline size_t dtype_bytes(DType t, int64_t n) { return size_t(n) * dtype_bits(t) / 8; }
const char* dtype_name(DType t);  // safetensors spelling: "F32", "BF16", ...
std::optional<DType> dtype_from_name(std::string_view s);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN (quiet).
inline uint16_t f32_to_bf16(float f) { return to_bf16(f); }

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
// OCP FP8 E4M3 (the "fn" variant: no infinities, 0x7f/0xff are NaN, max 448).
float fp8e4m3_to_f32(uint8_t v);
uint8_t f32_to_fp8e4m3(float f);  // round to nearest even, saturating to +-448

// Read element i of a buffer of any float-like dtype as f32.
float load_as_f32(const void* data, DType t, int64_t i);

}  // namespace mx
