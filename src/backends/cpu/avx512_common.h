#pragma once
// Pieces shared by the AVX-512 kernel files (matmul_avx512.cpp,
// matmul_bf16dot_avx512.cpp, attention_bf16_avx512.cpp); include only from files
// compiled with -mavx512f.
#include <immintrin.h>

#include <cstdint>

#define MX_INLINE inline __attribute__((always_inline))

namespace mx::matmul_detail::avx512 {

constexpr int V = 16;  // f32 lanes

// v, loaded once, stays in a register for every instruction that reads it. Without this
// GCC 12 folds the load into each of them (an FMA or vpdpbusd with a memory operand),
// one load per use where one will do, and a GEMM tile's loop becomes load-bound.
template <class T>
MX_INLINE void in_register(T& v) {
  __asm__("" : "+v"(v));
}

// The first n lanes (n clamped to [0, 16] / [0, 32]): a tail's load / store mask.
MX_INLINE __mmask16 first_n(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}
MX_INLINE __mmask32 first_n32(int64_t n) {
  return n >= 32 ? ~__mmask32(0) : n <= 0 ? __mmask32(0) : __mmask32((1u << n) - 1);
}

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

// One level of hsum's tree for the partial sums in two vectors at once: the lanes
// two shuffles pick (immediates I and J), added. f32x4 moves 128-bit quarters,
// ps moves lanes within each quarter.
template <int I, int J>
MX_INLINE __m512 add_f32x4(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, I), _mm512_shuffle_f32x4(a, b, J));
}
template <int I, int J>
MX_INLINE __m512 add_ps(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_ps(a, b, I), _mm512_shuffle_ps(a, b, J));
}

// hsum of 16 vectors at once, lane i of the result = hsum(v[i]) bitwise: the same
// additions with the same operands as hsum's tree, on vectors that hold two, four,
// then eight accumulators' partial sums side by side (45 shuffles and adds and one
// permute instead of 16 x 8). Level by level, as hsum: 256-bit halves (s8),
// 128-bit quarters (s4), pairs within a quarter (s2), neighbours (s1).
MX_INLINE __m512 hsum16(const __m512* v) {
  __m512 b[8], c[4], d[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) b[i] = add_f32x4<0x44, 0xEE>(v[2 * i], v[2 * i + 1]);  // v[2i].s8 | v[2i+1].s8
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) c[j] = add_f32x4<0x88, 0xDD>(b[2 * j], b[2 * j + 1]);  // quarter m: v[4j+m].s4
#pragma GCC unroll 2
  for (int k = 0; k < 2; ++k) d[k] = add_ps<0x44, 0xEE>(c[2 * k], c[2 * k + 1]);  // quarter m: v[8k+m].s2, v[8k+4+m].s2
  const __m512 s = add_ps<0x88, 0xDD>(d[0], d[1]);  // lane 4m + k: v[4k + m]
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), s);
}

// The same for 8 vectors: lane i of the result = hsum(v[i]).
MX_INLINE __m256 hsum8(const __m512* v) {
  __m512 b[4], c[2];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) b[i] = add_f32x4<0x44, 0xEE>(v[2 * i], v[2 * i + 1]);
#pragma GCC unroll 2
  for (int j = 0; j < 2; ++j) c[j] = add_f32x4<0x88, 0xDD>(b[2 * j], b[2 * j + 1]);
  const __m512 d = add_ps<0x44, 0xEE>(c[0], c[1]);
  const __m512 s = add_ps<0x88, 0xDD>(d, d);  // lane 4m: v[m], 4m + 1: v[4 + m] (4m + 2, 4m + 3 repeat them)
  return _mm512_castps512_ps256(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0), s));
}

// y[t * ld + r] = hsum(acc[t][r]): a tile's outputs, reduced 16 and 8 at a time.
template <int TT, int R>
MX_INLINE void store_hsums(float* y, int64_t ld, const __m512 (&acc)[TT][R]) {
  constexpr int N = TT * R;
  const __m512* v = &acc[0][0];
  alignas(64) float s[(N + 15) / 16 * 16];
  int i = 0;
#pragma GCC unroll 4
  for (; i + 16 <= N; i += 16) _mm512_store_ps(s + i, hsum16(v + i));
  if (i + 8 <= N) _mm256_store_ps(s + i, hsum8(v + i)), i += 8;
#pragma GCC unroll 8
  for (; i < N; ++i) s[i] = hsum(v[i]);
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) y[t * ld + r] = s[t * R + r];
}

}  // namespace mx::matmul_detail::avx512
