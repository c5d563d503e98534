#include "quant/mxfp4.h"

#include <cmath>
#include <initializer_list>

namespace mx::mxfp4 {

const float kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                         -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

uint8_t f32_to_e2m1(float v) {
  const uint8_t sign = std::signbit(v) ? 8 : 0;
  const float a = std::fabs(v);
  if (std::isnan(a)) return sign | 7;  // no NaN in E2M1: saturate (scale carries NaN)
  // Midpoints between representable magnitudes: the code is how many lie below a
  // (no loop: the quantizer runs this on every weight of a checkpoint),
  // and an exact tie goes to the even code (codes 0, 2, 4, 6 have an even mantissa bit).
  // mid[7] is NaN, equal to nothing: code 7 (up to +inf) has no tie above it.
  static const float mid[8] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, __builtin_nanf("")};
  const int code = (a > mid[0]) + (a > mid[1]) + (a > mid[2]) + (a > mid[3]) + (a > mid[4]) + (a > mid[5]) + (a > mid[6]);
  return uint8_t(sign | (code + ((code & 1) & (a == mid[code]))));
}

namespace {
int spec_shared_exp(float amax) {
  if (amax == 0.0f || !std::isfinite(amax)) return amax == 0.0f ? -127 : 128;
  // floor(log2(amax)) exactly: amax = f * 2^k with f in [0.5, 1). (std::log2 rounds
  // up to the next integer just below a power of two, e.g. log2f(128 - ulp) == 7.)
  int k;
  std::frexp(amax, &k);
  const int e = (k - 1) - 2;  // emax of E2M1 is 2
  return e < -127 ? -127 : e;
}

// 2^e and 2^-e for e in [-127, 127], both exact (2^-127 is a subnormal): x * 2^-e is
// x / 2^e to the bit, without a division or an ldexp call per block.
float pow2(int e) { return e8m0_to_f32(uint8_t(e + 127)); }

float block_error(const float* x, int e) {
  const float s = pow2(e), inv = pow2(-e);
  float err = 0;
  for (int i = 0; i < kBlock; ++i) {
    float d = kE2M1[f32_to_e2m1(x[i] * inv)] * s - x[i];
    err += d * d;
  }
  return err;
}
}  // namespace

uint8_t quantize_block(const float* x, uint8_t* packed, ScaleRule rule) {
  float amax = 0;
  bool finite = true;  // (fmax alone would skip a NaN element)
  for (int i = 0; i < kBlock; ++i) {
    const float a = std::fabs(x[i]);
    amax = a > amax ? a : amax;  // fmax's result (a NaN is skipped), without its libm call
    finite = finite && std::isfinite(x[i]);
  }
  int e = finite ? spec_shared_exp(amax) : 128;
  if (e > 127) {  // inf/NaN in the block: the scale is NaN, elements zero
    for (int i = 0; i < kBlock / 2; ++i) packed[i] = 0;
    return 0xFF;
  }
  if (rule == ScaleRule::Search && amax > 0) {
    float best = block_error(x, e);
    int best_e = e;
    for (int cand : {e - 1, e + 1}) {
      if (cand < -127 || cand > 127) continue;
      float err = block_error(x, cand);
      if (err < best) best = err, best_e = cand;
    }
    e = best_e;
  }
  const float inv = pow2(-e);
  for (int i = 0; i < kBlock / 2; ++i)
    packed[i] = uint8_t(f32_to_e2m1(x[2 * i] * inv) | (f32_to_e2m1(x[2 * i + 1] * inv) << 4));
  return uint8_t(e + 127);
}

void quantize_row(const float* x, int64_t k, uint8_t* packed, uint8_t* scales, ScaleRule rule) {
  for (int64_t b = 0; b < k / kBlock; ++b)
    scales[b] = quantize_block(x + b * kBlock, packed + b * (kBlock / 2), rule);
}

void dequantize_row(const uint8_t* packed, const uint8_t* scales, int64_t k, float* out) {
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const float s = e8m0_to_f32(scales[b]);
    for (int i = 0; i < kBlock / 2; ++i) {
      const uint8_t byte = packed[b * (kBlock / 2) + i];
      out[b * kBlock + 2 * i] = kE2M1[byte & 0xF] * s;
      out[b * kBlock + 2 * i + 1] = kE2M1[byte >> 4] * s;
    }
  }
}

}  // namespace mx::mxfp4
