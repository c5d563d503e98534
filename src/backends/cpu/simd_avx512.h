#pragma once
// Float-vector traits of AVX-512 (16 f32 lanes) for the kernels written once over
// a traits class S (attention_impl.h, activation_impl.h). Include only from a file
// compiled with -mavx512f (the *_avx512.cpp files).
#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/simd_exp.h"

namespace mx::simd {

struct Avx512 {
  static constexpr int V = 16;
  using F = __m512;
  using I = __m512i;
  using M = __mmask16;
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F bcast(const float* p) { return _mm512_set1_ps(*p); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static I loadi(const int32_t* p) { return _mm512_loadu_si512(p); }
  static M ge(I pos, int k) { return _mm512_cmpge_epi32_mask(pos, _mm512_set1_epi32(k)); }
  static M eq(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  static F select(M m, F a, F b) { return _mm512_mask_blend_ps(m, b, a); }
  static F mask_fma(F a, F b, F c, M m) { return _mm512_mask3_fmadd_ps(a, b, c, m); }
  static F min(F a, F b) { return _mm512_min_ps(a, b); }
  static F fnma(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a*b, rounded once
  static F round(F x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // e^x (simd_exp.h); 2^n by vscalefps, and below -87 the result is +0 instead,
  // as AVX2's: every result left is normal (>= 2^-126). A denormal result costs
  // a microcode assist on Intel cores (attention's softmax over a wide spread of
  // scores on an Intel Xeon: 2.7x slower with exps that went below 2^-126), and
  // the weights it drops add nothing a sum of f32 weights >= 1 could keep.
  // exp(-inf) = +0 and NaN stays NaN (the mask is "not below": NaN passes).
  static constexpr float kExpMin = -87.0f, kExpMax = 88.5f;
  static F times_pow2(F y, F n, F x) {
    return _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpMin), _CMP_NLT_UQ), y, n);
  }
  static F exp(F x) { return cephes_exp<Avx512>(x); }
  // Halves: the low half of a then of b; x's high half moved to the low one; the low half, 0 above.
  static F low_halves(F a, F b) { return _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)); }
  static F high_half(F x) { return _mm512_shuffle_f32x4(x, x, _MM_SHUFFLE(3, 2, 3, 2)); }
  static F low_half_only(F x) { return _mm512_maskz_mov_ps(0x00FF, x); }
};

}  // namespace mx::simd
