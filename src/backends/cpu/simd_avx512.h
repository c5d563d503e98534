#pragma once
// Float-vector traits of AVX-512 (16 f32 lanes) for the kernels written once over
// a traits class S (attention_impl.h, activation_impl.h). Include only from a file
// compiled with -mavx512f (the *_avx512.cpp files).
#include <immintrin.h>

#include <cstdint>

// GCC 12 warns that the merge source of the masked builtins behind
// _mm512_max_ps / _mm512_roundscale_ps (an _mm512_undefined_ps) may be used
// uninitialized: a false positive (the mask is all ones).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

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
  // e^x: x = n ln2 + r (Cody-Waite, ln2 in two parts), e^r by Cephes' expf
  // polynomial (S. Moshier, Cephes Math Library, expf.c: relative error ~1 ulp
  // on [-ln2/2, ln2/2]), times 2^n by vscalefps (exact, underflows to 0).
  // exp(0) = 1 and exp(-inf) = +0 exactly (the online softmax's identities);
  // NaN stays NaN (max/min return their second operand on NaN).
  static F exp(F x) {
    x = _mm512_min_ps(_mm512_set1_ps(88.5f), x);
    x = _mm512_max_ps(_mm512_set1_ps(-120.0f), x);
    const F n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    F r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    const F z = _mm512_mul_ps(r, r);
    F y = _mm512_set1_ps(1.9875691500E-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507E-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073E-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894E-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459E-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201E-1f));
    y = _mm512_fmadd_ps(y, z, r);
    y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(y, n);
  }
};

}  // namespace mx::simd
