#pragma once
// Float-vector traits of AVX2 + FMA (8 f32 lanes; masks are all-ones lanes) for
// the kernels written once over a traits class S (attention_impl.h,
// activation_impl.h). Include only from a file compiled with -mavx2 -mfma.
#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/simd_exp.h"

namespace mx::simd {

struct Avx2 {
  static constexpr int V = 8;
  using F = __m256;
  using I = __m256i;
  using M = __m256;
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static I loadi(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static M ge(I pos, int k) { return _mm256_castsi256_ps(_mm256_cmpgt_epi32(pos, _mm256_set1_epi32(k - 1))); }
  static M eq(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
  static F select(M m, F a, F b) { return _mm256_blendv_ps(b, a, m); }
  static F mask_fma(F a, F b, F c, M m) { return _mm256_blendv_ps(c, _mm256_fmadd_ps(a, b, c), m); }
  static F min(F a, F b) { return _mm256_min_ps(a, b); }
  static F fnma(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a*b, rounded once
  static F round(F x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // e^x (simd_exp.h); 2^n built in the exponent field, so below -87 (where 2^n
  // would leave the normal range) the result is +0 instead, and exp(-inf) = +0.
  static constexpr float kExpMin = -87.0f, kExpMax = 88.0f;
  static F times_pow2(F y, F n, F x) {
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const F v = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    return _mm256_blendv_ps(v, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(kExpMin), _CMP_LT_OQ));
  }
  static F exp(F x) { return cephes_exp<Avx2>(x); }
  // Halves: the low half of a then of b; x's high half moved to the low one; the low half, 0 above.
  static F low_halves(F a, F b) { return _mm256_permute2f128_ps(a, b, 0x20); }
  static F high_half(F x) { return _mm256_permute2f128_ps(x, x, 0x11); }
  static F low_half_only(F x) { return _mm256_blend_ps(_mm256_setzero_ps(), x, 0x0F); }
};

}  // namespace mx::simd
