#pragma once
// Float-vector traits of AVX2 + FMA (8 f32 lanes; masks are all-ones lanes) for
// the kernels written once over a traits class S (attention_impl.h,
// activation_impl.h). Include only from a file compiled with -mavx2 -mfma.
#include <immintrin.h>

#include <cstdint>

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
  // e^x as on AVX-512 (attention_avx512.cpp: Cody-Waite reduction, Cephes expf
  // polynomial), with 2^n built in the exponent field; below -87 (where 2^n
  // would leave the normal range) the result is +0, so exp(-inf) = +0.
  static F exp(F x0) {
    F x = _mm256_min_ps(_mm256_set1_ps(88.0f), x0);
    x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x);
    const F n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    F r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    const F z = _mm256_mul_ps(r, r);
    F y = _mm256_set1_ps(1.9875691500E-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507E-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073E-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894E-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459E-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201E-1f));
    y = _mm256_fmadd_ps(y, z, r);
    y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const F v = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    return _mm256_blendv_ps(v, _mm256_setzero_ps(), _mm256_cmp_ps(x0, _mm256_set1_ps(-87.0f), _CMP_LT_OQ));
  }
};

}  // namespace mx::simd
