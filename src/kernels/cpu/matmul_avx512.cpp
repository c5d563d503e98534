// AVX-512 matmul kernels (V = 16 lanes). Accumulation scheme: matmul_impl.h.

// GCC 12's AVX-512 headers seed results with self-initialised "undefined" vectors
// (GCC PR 105593), which -Wall reports as uninitialised at every inlined intrinsic.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/matmul_impl.h"

namespace mx::matmul_detail {
namespace {

constexpr int V = 16;
constexpr int kGemvRows = 8;  // rows per GEMV tile: 8 independent FMA chains
constexpr int kTileTok = 4;   // GEMM tile: 4 tokens x 6 rows = 24 accumulators,
constexpr int kTileRows = 6;  //   + 6 weight vectors + 1 x vector <= 32 zmm

// Weight loaders: a full chunk of 16, and a zero-padded partial chunk.
struct F32W {
  using T = float;
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 load_tail(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};

// bf16 -> f32 is exact: the bf16 bits are the high half of the f32.
struct Bf16W {
  using T = uint16_t;
  static __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static __m512 load(const uint16_t* p) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 load_tail(const uint16_t* p, __mmask16 m) {
    return widen(_mm256_maskz_loadu_epi16(m, p));
  }
};

// The one fixed reduction tree: 16 -> 8 -> 4 -> 2 -> 1, halves added pairwise.
// (The high half is extracted via the F-only f64x4 form: best_isa() does not require DQ.)
inline float hsum(__m512 v) {
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
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
  __m512 acc[TT][R];
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[t][r] = _mm512_setzero_ps();

  auto step = [&](auto load_w, auto load_x) __attribute__((always_inline)) {
    __m512 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = load_w(w + r * in);
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t) {
      const __m512 xv = load_x(x + t * in);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[t][r] = _mm512_fmadd_ps(wv[r], xv, acc[t][r]);
    }
  };
  int64_t i = 0;
  for (; i + V <= in; i += V)
    step([&](const T* p) { return L::load(p + i); },
         [&](const float* p) { return _mm512_loadu_ps(p + i); });
  if (i < in) {
    const __mmask16 m = __mmask16((1u << (in - i)) - 1);
    step([&](const T* p) { return L::load_tail(p + i, m); },
         [&](const float* p) { return _mm512_maskz_loadu_ps(m, p + i); });
  }
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) a.y[(t0 + t) * a.out + r0 + r] = hsum(acc[t][r]);
}

// Decode GEMV tile: one token, kGemvRows rows, streaming the weights. Same per-output
// operation sequence as dot_tile<L, 1, R>; it only adds software prefetch, one per
// 64-byte line of each row, far enough ahead to cover DRAM latency (the hardware
// prefetcher alone falls short on bf16, where each line takes twice the work).
template <class L>
inline void gemv_tile(const Args& a, int64_t t, int64_t r0) {
  using T = typename L::T;
  constexpr int R = kGemvRows;
  constexpr int kStep = 64 / sizeof(T);     // elements per cache line
  constexpr int kAhead = 1024 / sizeof(T);  // prefetch distance: 1 KiB per row (tuned)
  const int64_t in = a.in;
  const T* w = static_cast<const T*>(a.w) + r0 * in;
  const float* x = a.x + t * in;
  __m512 acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + kStep <= in; i += kStep) {
    // Near the end of the rows, fetch the start of the next tile's rows instead
    // (row r + R is R - 1 rows past row r + 1): +40% GB/s on 896-wide bf16 rows.
    const T* pf = w + i + kAhead + (i + kAhead < in ? 0 : (R - 1) * in);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(pf + r * in), _MM_HINT_T0);
#pragma GCC unroll 2
    for (int c = 0; c < kStep; c += V) {
      const __m512 xv = _mm512_loadu_ps(x + i + c);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[r] = _mm512_fmadd_ps(L::load(w + r * in + i + c), xv, acc[r]);
    }
  }
  for (; i + V <= in; i += V) {
    const __m512 xv = _mm512_loadu_ps(x + i);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(L::load(w + r * in + i), xv, acc[r]);
  }
  if (i < in) {
    const __mmask16 m = __mmask16((1u << (in - i)) - 1);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_fmadd_ps(L::load_tail(w + r * in + i, m), xv, acc[r]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) a.y[t * a.out + r0 + r] = hsum(acc[r]);
}

// Tile shapes and kernels for drive_rows (matmul_impl.h). Rows are split between
// threads in multiples of 24 = lcm(gemv_rows, tile_rows).
template <class L>
struct Avx512Tiles {
  static constexpr int gemv_rows = kGemvRows, tile_tok = kTileTok, tile_rows = kTileRows;
  static void gemv(const Args& a, int64_t t, int64_t r0) { gemv_tile<L>(a, t, r0); }
  template <int TT, int R>
  static void tile(const Args& a, int64_t t0, int64_t r0) {
    dot_tile<L, TT, R>(a, t0, r0);
  }
};

}  // namespace

Kernels avx512_kernels() {
  return {drive_rows<Avx512Tiles<F32W>>, drive_rows<Avx512Tiles<Bf16W>>, 24};
}

}  // namespace mx::matmul_detail
