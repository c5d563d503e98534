#include "quant/mxfp4.h"

#include <cmath>
#include <initializer_list>

namespace mx::mxfp4 {

const float kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                         -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

uint8_t f32_to_e2m1(float v) {
  const uint8_t sign = std::signbit(v) ? 8 : 0;
  float a = std::fabs(v);
  if (std::isnan(a)) return sign | 7;  // no NaN in E2M1: saturate (scale carries NaN)
  // Midpoints between representable magnitudes; ties go to the even code
  // (codes 0, 2, 4, 6 have an even mantissa bit).
  static const float mid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  uint8_t code = 0;
  while (code < 7 && a > mid[code]) ++code;
  if (code < 7 && a == mid[code] && (code & 1)) ++code;  // exact tie: round to even
  return sign | code;
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

float block_error(const float* x, int e) {
  const float s = std::ldexp(1.0f, e);
  float err = 0;
  for (int i = 0; i < kBlock; ++i) {
    float d = kE2M1[f32_to_e2m1(x[i] / s)] * s - x[i];
    err += d * d;
  }
  return err;
}
}  // namespace

uint8_t quantize_block(const float* x, uint8_t* packed, ScaleRule rule) {
  float amax = 0;
  bool finite = true;  // (fmax alone would skip a NaN element)
  for (int i = 0; i < kBlock; ++i) {
    amax = std::fmax(amax, std::fabs(x[i]));
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
  const float s = std::ldexp(1.0f, e);
  for (int i = 0; i < kBlock / 2; ++i)
    packed[i] = uint8_t(f32_to_e2m1(x[2 * i] / s) | (f32_to_e2m1(x[2 * i + 1] / s) << 4));
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
