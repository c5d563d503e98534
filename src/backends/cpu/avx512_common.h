#pragma once
// Pieces shared by the AVX-512 matmul kernel files (matmul_avx512.cpp,
// matmul_bf16dot_avx512.cpp); include only from files compiled with -mavx512f.
#include <immintrin.h>

#define MX_INLINE inline __attribute__((always_inline))

namespace mx::matmul_detail::avx512 {

constexpr int V = 16;  // f32 lanes

// The one fixed reduction tree: 16 -> 8 -> 4 -> 2 -> 1, halves added pairwise
// (matmul_impl.h). The high half is extracted via the F-only f64x4 form: best_isa()
// does not require DQ.
inline float hsum(__m512 v) {
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
  return _mm_cvtss_f32(s1);
}

}  // namespace mx::matmul_detail::avx512
