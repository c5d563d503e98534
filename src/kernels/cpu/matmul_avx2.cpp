// AVX2 + FMA matmul kernels (V = 8 lanes). Accumulation scheme: matmul_impl.h.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/matmul_impl.h"

namespace mx::matmul_detail {
namespace {

constexpr int V = 8;
constexpr int kGemvRows = 8;  // rows per GEMV tile: 8 independent FMA chains
constexpr int kTileTok = 4;   // GEMM tile: 4 tokens x 3 rows = 12 accumulators
constexpr int kTileRows = 3;  //   + 3 weight vectors + 1 x vector = 16 ymm

struct F32W {
  using T = float;
  static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
};

// bf16 -> f32 is exact: the bf16 bits are the high half of the f32.
struct Bf16W {
  using T = uint16_t;
  static __m256 load(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};

// The one fixed reduction tree: 8 -> 4 -> 2 -> 1, halves added pairwise.
inline float hsum(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
  return _mm_cvtss_f32(s1);
}

// y[t0 .. t0+TT, r0 .. r0+R): each output one accumulator, chunks in order.
template <class L, int TT, int R>
inline void dot_tile(const Args& a, int64_t t0, int64_t r0) {
  using T = typename L::T;
  const int64_t in = a.in;
  const T* w = static_cast<const T*>(a.w) + r0 * in;
  const float* x = a.x + t0 * in;
  __m256 acc[TT][R];
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[t][r] = _mm256_setzero_ps();

  auto step = [&](const T* const* wp, const float* const* xp) {
    __m256 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = L::load(wp[r]);
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t) {
      const __m256 xv = _mm256_loadu_ps(xp[t]);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[t][r] = _mm256_fmadd_ps(wv[r], xv, acc[t][r]);
    }
  };
  int64_t i = 0;
  for (; i + V <= in; i += V) {
    const T* wp[R];
    const float* xp[TT];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wp[r] = w + r * in + i;
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t) xp[t] = x + t * in + i;
    step(wp, xp);
  }
  if (i < in) {
    // The partial chunk goes through the same full-width FMA from zero-padded
    // copies (AVX2 has no 16-bit masked load).
    const size_t n = size_t(in - i);
    alignas(32) T wt[R][V] = {};
    alignas(32) float xt[TT][V] = {};
    const T* wp[R];
    const float* xp[TT];
    for (int r = 0; r < R; ++r) {
      std::memcpy(wt[r], w + r * in + i, n * sizeof(T));
      wp[r] = wt[r];
    }
    for (int t = 0; t < TT; ++t) {
      std::memcpy(xt[t], x + t * in + i, n * sizeof(float));
      xp[t] = xt[t];
    }
    step(wp, xp);
  }
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) a.y[(t0 + t) * a.out + r0 + r] = hsum(acc[t][r]);
}

// Tile shapes and kernels for drive_rows (matmul_impl.h). Rows are split between
// threads in multiples of 24 = lcm(gemv_rows, tile_rows). GEMV is the plain 1-token
// tile (no software prefetch, unlike AVX-512: untuned, no AVX2-only machine at hand).
template <class L>
struct Avx2Tiles {
  static constexpr int gemv_rows = kGemvRows, tile_tok = kTileTok, tile_rows = kTileRows;
  static void gemv(const Args& a, int64_t t, int64_t r0) { dot_tile<L, 1, kGemvRows>(a, t, r0); }
  template <int TT, int R>
  static void tile(const Args& a, int64_t t0, int64_t r0) {
    dot_tile<L, TT, R>(a, t0, r0);
  }
};

}  // namespace

Kernels avx2_kernels() {
  return {drive_rows<Avx2Tiles<F32W>>, drive_rows<Avx2Tiles<Bf16W>>, 24};
}

}  // namespace mx::matmul_detail
