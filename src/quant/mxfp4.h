#pragma once
// OCP Microscaling MXFP4 (OCP MX v1.0; docs/architectures.md 5.1): blocks of 32
// E2M1 elements along the reduction dimension sharing one E8M0 scale.
//   E2M1 codes 0..7 -> 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign.
//   E8M0 byte e -> 2^(e - 127); 0xFF is NaN.
// Storage is AMD Quark's (and vLLM's / gpt-oss's): a row of K elements is K/2
// bytes, element 2j in the low nibble of byte j and element 2j+1 in the high
// nibble; the row's K/32 scales are separate bytes.
#include <cstdint>

namespace mx::mxfp4 {

constexpr int kBlock = 32;

extern const float kE2M1[16];  // code -> value

inline float e8m0_to_f32(uint8_t e) {
  if (e == 0xFF) return __builtin_nanf("");
  // 2^(e-127): build the float directly; e == 0 gives 2^-127, a subnormal.
  if (e == 0) return 0x1p-127f;
  uint32_t bits = uint32_t(e) << 23;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

// Nearest E2M1 code of v (already divided by the block scale): round to nearest
// even, saturating to +-6 (the spec's saturating conversion).
uint8_t f32_to_e2m1(float v);

enum class ScaleRule {
  Spec,    // shared_exp = floor(log2(amax)) - 2 (OCP MX v1.0 6.3)
  Search,  // best of {spec - 1, spec, spec + 1} by block squared error
};

// Quantizes one block of 32 values: writes 16 packed bytes and returns the scale byte.
uint8_t quantize_block(const float* x, uint8_t* packed, ScaleRule rule);

// Quantizes a row of k values (k % 32 == 0): k/2 packed bytes, k/32 scales.
void quantize_row(const float* x, int64_t k, uint8_t* packed, uint8_t* scales, ScaleRule rule);
// Inverse of quantize_row.
void dequantize_row(const uint8_t* packed, const uint8_t* scales, int64_t k, float* out);

}  // namespace mx::mxfp4
