// AVX2 + FMA matmul kernels (V = 8 lanes). Accumulation scheme: matmul_impl.h.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "core/cpu_features.h"
#include "backends/cpu/matmul_impl.h"

#define MX_INLINE inline __attribute__((always_inline))

namespace mx::matmul_detail {
namespace {

constexpr int V = 8;

// Weight loaders: 8 elements as f32; s is the chunk's block scale (F8_E4M3 only).
struct F32W {
  using T = float;
  static constexpr int64_t kBlock = 0;
  static __m256 load(const float* p, __m256) { return _mm256_loadu_ps(p); }
};

// bf16 -> f32 is exact: the bf16 bits are the high half of the f32.
struct Bf16W {
  using T = uint16_t;
  static constexpr int64_t kBlock = 0;
  static __m256 load(const uint16_t* p, __m256) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};

// F8_E4M3 -> f32 exactly through f16 (see the AVX-512 file): the value times 2^-8,
// with 2^8 folded into the block scale; 0x7f / 0xff become NaN.
struct Fp8W {
  using T = uint8_t;
  static constexpr int64_t kBlock = 128;
  static MX_INLINE __m256 load(const uint8_t* p, __m256 s) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i h = _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(b), 7),
                                    _mm_set1_epi16(int16_t(0xBFFF)));
    const __m128i nan8 = _mm_cmpeq_epi8(_mm_or_si128(b, _mm_set1_epi8(int8_t(0x80))), _mm_set1_epi8(-1));
    const __m256 f = _mm256_blendv_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(__builtin_nanf("")),
                                      _mm256_castsi256_ps(_mm256_cvtepi8_epi32(nan8)));
    return _mm256_mul_ps(f, s);
  }
  static MX_INLINE __m256 scale(const Args& a, int64_t row, int64_t kb) {
    const float* s = static_cast<const float*>(a.scales);
    return _mm256_set1_ps((s ? s[(row >> 7) * a.scale_cols + kb] : 1.0f) * 256.0f);
  }
};

// Calls f(i0, i1, sc) per column block of rows r0 .. r0+R (see the AVX-512 file).
template <class L, int R, class F>
MX_INLINE void col_blocks(const Args& a, int64_t r0, F&& f) {
  __m256 sc[R];
  if constexpr (L::kBlock == 0) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) sc[r] = _mm256_setzero_ps();
    f(int64_t(0), a.in, sc);
  } else {
    for (int64_t i0 = 0, kb = 0; i0 < a.in; i0 += L::kBlock, ++kb) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) sc[r] = L::scale(a, r0 + r, kb);
      f(i0, std::min(a.in, i0 + L::kBlock), sc);
    }
  }
}

// The one fixed reduction tree: 8 -> 4 -> 2 -> 1, halves added pairwise.
inline float hsum(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
  return _mm_cvtss_f32(s1);
}

// y[t0 .. t0+TT, r0 .. r0+R): each output one accumulator, chunks in order. PF (the
// GEMV tiles): software prefetch a.prefetch bytes ahead on each row (prefetch_rows,
// matmul_impl.h), or, where that reaches a whole row, the next tile (below).
template <class L, int TT, int R, bool PF = false>
void dot_tile(const Args& a, int64_t t0, int64_t r0) {
  using T = typename L::T;
  const int64_t in = a.in;
  const T* w = static_cast<const T*>(a.w) + r0 * in;
  const float* x = a.x + t0 * in;
  __m256 acc[TT][R];
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[t][r] = _mm256_setzero_ps();

  auto step = [&](const T* const* wp, const float* const* xp, const __m256* sc) __attribute__((always_inline)) {
    __m256 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = L::load(wp[r], sc[r]);
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t) {
      __m256 xv = _mm256_loadu_ps(xp[t]);
      // One load per activation vector: left alone, GCC may fold it into each of the
      // R FMAs as a memory operand, R loads where one serves. It did so on a 6 x 2
      // tile tried on AMD Zen 3 (13.3 ms against 10.5 with this, 4864 x 896 bf16, 64
      // tokens; not kept); the 4 x 3 tile's loads were separate already (no change).
      __asm__("" : "+x"(xv));
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[t][r] = _mm256_fmadd_ps(wv[r], xv, acc[t][r]);
    }
  };
  auto full = [&](int64_t i, const __m256* sc) __attribute__((always_inline)) {
    const T* wp[R];
    const float* xp[TT];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wp[r] = w + r * in + i;
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t) xp[t] = x + t * in + i;
    step(wp, xp, sc);
  };
  constexpr int kLine = 64 / int(sizeof(T));  // elements per cache line, a multiple of V
  const int64_t ahead = PF ? a.prefetch / int64_t(sizeof(T)) : 0;
  // A distance of a whole row or more (short rows: 896 bf16 columns are 28 lines, too
  // few for the hardware's stream prefetchers to follow 8 of them) prefetches the next
  // tile in address order instead, R lines per line of each row, so all of it arrives
  // while this tile computes: 896-wide bf16 rows +26% (AMD EPYC Zen 3, one thread:
  // 9.4 -> 11.8 GB/s, BENCHMARKS.md).
  const char* next_tile = reinterpret_cast<const char*>(w + R * in);
  const bool linear = ahead >= in;
  col_blocks<L, R>(a, r0, [&](int64_t i0, int64_t i1, const __m256* sc) __attribute__((always_inline)) {
    int64_t i = i0;
    if (PF && ahead > 0)
      for (; i + kLine <= i1; i += kLine) {
        if (linear) {
          prefetch_lines(next_tile + (i / kLine) * R * 64, R * 64);
        } else {
          prefetch_rows<R>(w, i, ahead, in);
        }
#pragma GCC unroll 8
        for (int c = 0; c < kLine; c += V) full(i + c, sc);
      }
    for (; i + V <= i1; i += V) full(i, sc);
    if (i < i1) {
      // The partial chunk goes through the same full-width FMA from zero-padded
      // copies (AVX2 has no 16-bit masked load).
      const size_t n = size_t(i1 - i);
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
      step(wp, xp, sc);
    }
  });
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) a.y[(t0 + t) * a.out + r0 + r] = hsum(acc[t][r]);
}

template <class L>
struct Tiles {
  template <int TT, int R>
  static void tile(const Args& a, int64_t t0, int64_t r0) {
    dot_tile<L, TT, R>(a, t0, r0);
  }
};

// GEMM: TT x R accumulators + R weight vectors + 1 x vector <= 16 ymm.
template <class L>
struct FloatVariants {
  // Small batches: 2 x 4 and 4 x 2 sub-tiles (8 accumulators).
  static constexpr Gemv gemv[] = {
      {8, dot_tile<L, 1, 8, true>, in_subtiles<dot_tile<L, 2, 4, true>, 4, 8>,
       in_subtiles<dot_tile<L, 4, 2, true>, 2, 8>},
      {4, dot_tile<L, 1, 4, true>, dot_tile<L, 2, 4, true>, in_subtiles<dot_tile<L, 4, 2, true>, 2, 4>}};
  static constexpr Gemm gemm[] = {gemm_of<Tiles<L>, 4, 3>(), gemm_of<Tiles<L>, 2, 4>()};
  static DtypeKernels kernels() { return {nullptr, gemv, gemm}; }
};

// --- MXFP4 --------------------------------------------------------------------
// As the AVX-512 kernels (see there), 8 blocks at a time: a half group of one row
// is 128 packed bytes, four 32-byte loads of 2 blocks; lane k of load j holds block
// 2j + k, and after the reduction int32 position 4k + j holds block 2j + k. The two
// halves of a 16-block group go to two accumulators, so an output's 16 lanes are
// (acc0, acc1), each in that order within its half (kOrder). Integer dot products:
// AVX-VNNI vpdpbusd where the CPU has it (emitted by inline asm: this file is
// compiled for plain AVX2), else vpmaddubsw + vpmaddwd (exact here: an int16 lane
// sums at most 4 products, |4 * 24 * 127| = 12192, before vpmaddwd widens it to
// int32, so nothing saturates; pair_dot2 sums 8, 24384). Both give the same integers.
namespace mx4 {

constexpr uint8_t kOrder[16] = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};

struct Half {
  __m256i lo[4], hi[4];
  __m256 ws;
};

// Row bytes past a row's last block are never read: a row's last half, when the
// row's block count is not a multiple of 8 (Tail, `left` blocks present: 4 of 8 on
// 896-wide rows), loads only its blocks. The missing ones get weight byte 0 (u8 12
// after the table) and scale byte 0 (ws +0), as if the row were zero-padded; their
// activations are zero-padded (QuantAct), so they add +0.
template <bool Tail = false>
MX_INLINE void load_half(const uint8_t* wp, const uint8_t* sp, Half& h, int left = 8) {
  const __m256i lut = _mm256_broadcastsi128_si256(
      _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  const __m256i m0f = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    __m256i v;
    if (!Tail || 2 * j + 2 <= left)
      v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + 32 * j));
    else if (2 * j + 1 == left)  // block 2j only: the upper 128 bits zero
      v = _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wp + 32 * j)));
    else
      v = _mm256_setzero_si256();
    h.lo[j] = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m0f));
    h.hi[j] = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m0f));
  }
  __m128i e8;
  if constexpr (Tail) {
    // The 8 bytes that end with the row's last scale, shifted down: their first
    // 8 - left belong to the half before (the caller guarantees one: nb > 8).
    uint64_t b;
    std::memcpy(&b, sp + left - 8, 8);
    e8 = _mm_cvtsi64_si128(int64_t(b >> (8 * (8 - left))));
  } else {
    e8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sp));
  }
  e8 = _mm_shuffle_epi8(e8, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(kOrder)));
  const __m256i e = _mm256_cvtepu8_epi32(e8);
  // 2^(e - 127) is e's bits as an f32 exponent; e = 0 (2^-127, flushed to +0 as
  // mx_scale does) is +0 already, so only 255 needs its own value, NaN.
  __m256i bits = _mm256_slli_epi32(e, 23);
  bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7FC00000),
                            _mm256_cmpeq_epi32(e, _mm256_set1_epi32(255)));  // NaN
  h.ws = _mm256_castsi256_ps(bits);
}

// acc + the dot products of (lo, xe) and (hi, xo) per int32 lane (4 byte pairs each).
template <bool Vnni>
MX_INLINE __m256i pair_dot(__m256i acc, __m256i lo, __m256i xe, __m256i hi, __m256i xo) {
  if constexpr (Vnni) {
    __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(lo), "x"(xe));
    __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(hi), "x"(xo));
    return acc;
  } else {
    const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(s, _mm256_set1_epi16(1)));
  }
}

// pair_dot of two such pairs of vectors whose int32 lanes hold the same blocks (the
// regrouped rows): without VNNI their 8 products per int16 lane are summed before
// vpmaddwd widens them, one vpmaddwd where pair_dot takes two. Exact: weights are
// 0 .. 24, activations -127 .. 127 (QuantAct), so |8 * 24 * 127| = 24384 < 2^15 and
// no int16 sum wraps (vpmaddubsw's own 2-product sums do not saturate either: 6096).
template <bool Vnni>
MX_INLINE __m256i pair_dot2(__m256i acc, __m256i lo0, __m256i xe0, __m256i hi0, __m256i xo0, __m256i lo1,
                            __m256i xe1, __m256i hi1, __m256i xo1) {
  if constexpr (Vnni) {
    return pair_dot<true>(pair_dot<true>(acc, lo0, xe0, hi0, xo0), lo1, xe1, hi1, xo1);
  } else {
    const __m256i s0 = _mm256_add_epi16(_mm256_maddubs_epi16(lo0, xe0), _mm256_maddubs_epi16(hi0, xo0));
    const __m256i s1 = _mm256_add_epi16(_mm256_maddubs_epi16(lo1, xe1), _mm256_maddubs_epi16(hi1, xo1));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_add_epi16(s0, s1), _mm256_set1_epi16(1)));
  }
}

// A half's load j of activations: its evens at kEven[j] (QuantAct), its odds 64 bytes on.
constexpr int kEven[4] = {0, 32, 128, 160};

// acc + float(d - sum12) * ws * s per lane: a block's integer dot product less its +12
// offset's share (exact in f32), times its weight and activation scales, the one FMA per
// block and lane of the scheme (matmul_impl.h); half_step and the GEMM's tile both end so.
MX_INLINE __m256 add_blocks(__m256 acc, __m256i d, __m256i sum12, __m256 ws, __m256 s) {
  return _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(d, sum12)), ws), s, acc);
}

// acc[p] = fma(float(d) * ws, s, acc[p]) for the 8 blocks of a half group; xq at
// the half's first block.
// nj: the 2-block loads present (4 but in a row's tail: its missing blocks add +0).
template <bool Vnni>
MX_INLINE __m256 half_step(__m256 acc, const Half& h, const int8_t* xq, const float* xs,
                           const int32_t* xsum, int nj = 4) {
  __m256i p[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    if (j >= nj) {
      p[j] = _mm256_setzero_si256();
      continue;
    }
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + kEven[j]));
    const __m256i o = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + kEven[j] + 64));
    p[j] = pair_dot<Vnni>(_mm256_setzero_si256(), h.lo[j], e, h.hi[j], o);
  }
  const __m256i s01 = _mm256_add_epi32(_mm256_unpacklo_epi32(p[0], p[1]), _mm256_unpackhi_epi32(p[0], p[1]));
  const __m256i s23 = _mm256_add_epi32(_mm256_unpacklo_epi32(p[2], p[3]), _mm256_unpackhi_epi32(p[2], p[3]));
  const __m256i sums = _mm256_add_epi32(_mm256_unpacklo_epi64(s01, s23), _mm256_unpackhi_epi64(s01, s23));
  return add_blocks(acc, sums, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xsum)), h.ws,
                    _mm256_loadu_ps(xs));
}

// An output's two accumulators (its 16 lanes, kOrder within each half) back to natural
// order, then the AVX-512 tree's first step (lane l + lane l + 8) and the 8-lane tree.
MX_INLINE __m256 output_lanes(__m256 acc0, __m256 acc1) {
  const __m256i unperm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  return _mm256_add_ps(_mm256_permutevar8x32_ps(acc0, unperm), _mm256_permutevar8x32_ps(acc1, unperm));
}
MX_INLINE float output_sum(__m256 acc0, __m256 acc1) { return hsum(output_lanes(acc0, acc1)); }

// hsum of R = 4 or 8 vectors at once, to y[0 .. R): hsum's adds with their operands in
// the same order (the same bits, NaN payloads included), several rows per instruction.
// For v = [a0 .. a7]: s4[i] = a[i] + a[i + 4], s2[i] = s4[i] + s4[i + 2], s2[0] + s2[1].
template <int R>
MX_INLINE void hsum_rows(const __m256 (&v)[R], float* y) {
  static_assert(R == 4 || R == 8);
  __m256 w[2];
#pragma GCC unroll 2
  for (int g = 0; g < R / 4; ++g) {
    const __m256* u = v + 4 * g;
    const auto s4 = [](__m256 x0, __m256 x1) {  // [s4 of x0 | s4 of x1]
      return _mm256_add_ps(_mm256_permute2f128_ps(x0, x1, 0x20), _mm256_permute2f128_ps(x0, x1, 0x31));
    };
    const __m256d u01 = _mm256_castps_pd(s4(u[0], u[1])), u23 = _mm256_castps_pd(s4(u[2], u[3]));
    // [s2 of row 0 (2 lanes), s2 of row 2 | s2 of row 1, s2 of row 3] (rows of u)
    w[g] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(u01, u23)), _mm256_castpd_ps(_mm256_unpackhi_pd(u01, u23)));
  }
  if constexpr (R == 4) w[1] = w[0];
  // [rows 0 2 4 6 | 1 3 5 7], then in order
  const __m256 s1 = _mm256_add_ps(_mm256_shuffle_ps(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm256_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m256 rows = _mm256_permutevar8x32_ps(s1, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  if constexpr (R == 8) _mm256_storeu_ps(y, rows);
  else _mm_storeu_ps(y, _mm256_castps256_ps128(rows));
}

template <int TT, int R>
MX_INLINE void store_sums(const Args& a, int64_t t0, int64_t r0, const __m256 (&acc)[TT][R][2]) {
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) a.y[(t0 + t) * a.out + r0 + r] = output_sum(acc[t][r][0], acc[t][r][1]);
}

// Row r's half hx (its packed bytes at wr, scale bytes at sr), `left` of its blocks
// in the row. A tail with no half before it (a row of under 8 blocks, in < 256) has
// nowhere to read its scales' first bytes from: it is copied, zero-padded.
MX_INLINE void load_half_padded(const uint8_t* wr, const uint8_t* sr, int64_t left, int64_t hx, Half& h) {
  if (left >= 8) return load_half(wr, sr, h);
  if (hx > 0) return load_half<true>(wr, sr, h, int(left));
  alignas(32) uint8_t wt[128] = {}, st[8] = {};
  std::memcpy(wt, wr, size_t(left) * 16);
  std::memcpy(st, sr, size_t(left));
  load_half(wt, st, h);
}

// Half hx of row r of o.
MX_INLINE void load_row_half(const MxRowOperands& o, int r, int64_t hx, Half& h) {
  load_half_padded(o.w + r * o.rb + hx * 128, o.sc + r * o.nb + hx * 8, o.nb - hx * 8, hx, h);
}

// TT tokens x R rows, all R rows' halves unpacked before their TT x R products: the
// GEMM's 2 x 2 tile and the rows its tile shape leaves over (the 1-token GEMV is
// gemv_tile, below).
template <bool Vnni, int TT, int R>
void tile(const Args& a, int64_t t0, int64_t r0) {
  const MxTileOperands o(a, t0, r0);
  const int64_t nh = (o.nb + 7) / 8;
  const QuantAct& qa = *a.qa;
  __m256 acc[TT][R][2];
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[t][r][0] = acc[t][r][1] = _mm256_setzero_ps();
  for (int64_t hx = 0; hx < nh; ++hx) {
    Half h[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) load_row_half(o, r, hx, h[r]);
    const int k = int(hx & 1);
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[t][r][k] = half_step<Vnni>(acc[t][r][k], h[r], o.xq + t * qa.q_stride + hx * 256,
                                       o.xs + t * qa.nbp + hx * 8, o.xsum + t * qa.nbp + hx * 8);
  }
  store_sums(a, t0, r0, acc);
}

// The 1-token GEMV: R rows one after another, each to its end. A row's half is
// consumed as soon as it is unpacked, so the row's 2 accumulators and the half stay
// in registers (tile<1, R> unpacks all R rows' halves first: 72 ymm of them through
// the stack for R = 8), and the weights are read as one sequential stream (rows are
// contiguous), prefetched `a.prefetch` bytes ahead in it. The R rows' sums are reduced
// together (hsum_rows). Half hx still goes to accumulator hx & 1, the order every
// path sums in, so every output keeps its bits. Against tile<1, R> (AMD EPYC Zen 3,
// one thread, weights in cache): 896-wide rows +23%, 4864-wide +19% (BENCHMARKS.md).
template <bool Vnni, int R, bool PF>
void gemv_tile(const Args& a, int64_t t0, int64_t r0) {
  const MxTileOperands o(a, t0, r0);
  const int64_t nfull = o.nb / 8;
  const int left = int(o.nb % 8);
  const int64_t ahead = PF ? a.prefetch : 0;
  if (PF && ahead > 0) prefetch_next_scales<R>(o.sc, o.nb);
  __m256 sums[R];
  for (int r = 0; r < R; ++r) {
    const uint8_t* wr = o.w + r * o.rb;
    const uint8_t* sr = o.sc + r * o.nb;
    const auto step = [&](int64_t hx, __m256 acc) __attribute__((always_inline)) {
      if (PF && ahead > 0) prefetch_lines(wr + hx * 128 + ahead, 128);
      Half h;
      load_half(wr + hx * 128, sr + hx * 8, h);
      return half_step<Vnni>(acc, h, o.xq + hx * 256, o.xs + hx * 8, o.xsum + hx * 8);
    };
    const auto tail = [&](int64_t hx, __m256 acc) __attribute__((always_inline)) {
      Half h;
      load_half_padded(wr + hx * 128, sr + hx * 8, left, hx, h);
      return half_step<Vnni>(acc, h, o.xq + hx * 256, o.xs + hx * 8, o.xsum + hx * 8, (left + 1) / 2);
    };
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t hx = 0;
    for (; hx + 2 <= nfull; hx += 2) {
      acc0 = step(hx, acc0);
      acc1 = step(hx + 1, acc1);
    }
    if (hx < nfull) {
      acc0 = step(hx, acc0);
      if (left) acc1 = tail(hx + 1, acc1);
    } else if (left) {
      acc0 = tail(hx, acc0);
    }
    sums[r] = output_lanes(acc0, acc1);
  }
  hsum_rows(sums, a.y + t0 * a.out + r0);
}

template <bool Vnni>
struct Tiles {
  template <int TT, int R>
  static void tile(const Args& a, int64_t t0, int64_t r0) {
    mx4::tile<Vnni, TT, R>(a, t0, r0);
  }
};

// --- GEMM: rows unpacked and regrouped once per chunk (as the AVX-512 GEMM) ---
// half_step spends 9 shuffles and adds per token and row on its 4 -> 1 lane
// reduction, and tile unpacks its rows' nibbles for every TT tokens. Regrouped
// (regroup4: a 4 x 4 transpose of int32 per 128-bit lane), int32 lane 4k + j of
// vector i holds bytes 4i .. 4i + 3 of block 2j + k, the block half_step's reduction
// puts in that lane; the activations are regrouped the same way once per call
// (regroup_row, QuantAct::qg). So a half's 8 products (vpdpbusd, or vpmaddubsw pairs)
// leave each block's sum whole in its lane. d_b is an exact integer either way, and
// each lane's FMAs are half_step's: every output keeps its bits (matmul_impl.h).
MX_INLINE void regroup4(const __m256i* x, __m256i* out) {
  const __m256i a0 = _mm256_unpacklo_epi32(x[0], x[1]), a1 = _mm256_unpackhi_epi32(x[0], x[1]);
  const __m256i a2 = _mm256_unpacklo_epi32(x[2], x[3]), a3 = _mm256_unpackhi_epi32(x[2], x[3]);
  out[0] = _mm256_unpacklo_epi64(a0, a2);
  out[1] = _mm256_unpackhi_epi64(a0, a2);
  out[2] = _mm256_unpacklo_epi64(a1, a3);
  out[3] = _mm256_unpackhi_epi64(a1, a3);
}

// A half's evens (lo) and odds (hi), regrouped: vector 4e + i (e = 0: evens, 1: odds)
// at dst + 32 (4e + i).
MX_INLINE void store_regrouped(const __m256i* lo, const __m256i* hi, void* dst) {
  __m256i v[8];
  regroup4(lo, v);
  regroup4(hi, v + 4);
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m) _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<char*>(dst) + 32 * m), v[m]);
}

// One token row of q (QuantAct: half hx's load j at hx * 256 + kEven[j], odds 64 on).
void regroup_row(const int8_t* q, int64_t nbp, int8_t* qg) {
  for (int64_t hx = 0; hx < nbp / 8; ++hx) {
    __m256i lo[4], hi[4];
    for (int j = 0; j < 4; ++j) {
      lo[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + hx * 256 + kEven[j]));
      hi[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + hx * 256 + kEven[j] + 64));
    }
    store_regrouped(lo, hi, qg + hx * 256);
  }
}

namespace gemm {

// The prepared rows of the tile this thread computes: half hx of row r is 8 vectors of
// u8 weights at w + (hx * R + r) * 256 bytes, its 8 block scales (kOrder) at
// ws + (hx * R + r) * 8.
thread_local PrepBuffer t_buf;
thread_local MxRows t_rows;

template <int R>
void prep(const Args& a, int64_t, int64_t r0) {
  const MxRowOperands o(a, r0);
  const int64_t nh = (o.nb + 7) / 8;
  t_rows.place(t_buf, size_t(nh * R) * 256, size_t(nh * R) * 8);
  for (int r = 0; r < R; ++r)
    for (int64_t hx = 0; hx < nh; ++hx) {
      Half h;
      load_row_half(o, r, hx, h);
      store_regrouped(h.lo, h.hi, t_rows.w + (hx * R + r) * 256);
      _mm256_storeu_ps(t_rows.ws + (hx * R + r) * 8, h.ws);
    }
}

// y[t0 .. t0+TT, r0 .. r0+R) from the rows prep made on this thread.
template <bool Vnni, int TT, int R>
void tile(const Args& a, int64_t t0, int64_t r0) {
  const int64_t nh = (a.in / 32 + 7) / 8;
  const QuantAct& qa = *a.qa;
  const int8_t* xq = qa.qg + t0 * qa.q_stride;
  const float* xs = qa.s + t0 * qa.nbp;
  const int32_t* xsum = qa.sum12 + t0 * qa.nbp;
  __m256 acc[TT][R][2];
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[t][r][0] = acc[t][r][1] = _mm256_setzero_ps();
  for (int64_t hx = 0; hx < nh; ++hx) {
    const uint8_t* w = t_rows.w + hx * R * 256;
    __m256i d[TT][R];
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) d[t][r] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int i = 0; i < 4; i += 2) {  // vectors i and i + 1
      __m256i lo[R][2], hi[R][2];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        for (int u = 0; u < 2; ++u) {
          lo[r][u] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * 256 + 32 * (i + u)));
          hi[r][u] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * 256 + 32 * (4 + i + u)));
        }
#pragma GCC unroll 8
      for (int t = 0; t < TT; ++t) {
        const int8_t* x = xq + t * qa.q_stride + hx * 256;
        __m256i xe[2], xo[2];
        for (int u = 0; u < 2; ++u) {
          xe[u] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * (i + u)));
          xo[u] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * (4 + i + u)));
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
          d[t][r] = pair_dot2<Vnni>(d[t][r], lo[r][0], xe[0], hi[r][0], xo[0], lo[r][1], xe[1], hi[r][1], xo[1]);
      }
    }
    const int k = int(hx & 1);
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t) {
      const __m256i sum12 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xsum + t * qa.nbp + hx * 8));
      const __m256 s = _mm256_loadu_ps(xs + t * qa.nbp + hx * 8);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[t][r][k] = add_blocks(acc[t][r][k], d[t][r], sum12, _mm256_loadu_ps(t_rows.ws + (hx * R + r) * 8), s);
    }
  }
  store_sums(a, t0, r0, acc);
}

// full / tok1 read the rows prep made just before; row1 / one, for rows left over by
// the tile shape, read the packed weights as the GEMV does.
template <bool Vnni, int TT, int R>
constexpr Gemm of() {
  static_assert(TT >= kMinRegroupTokens);  // the tiles (tok1 too) read QuantAct::qg
  return {.tokens = TT, .rows = R, .full = tile<Vnni, TT, R>, .tok1 = tile<Vnni, 1, R>,
          .row1 = mx4::tile<Vnni, TT, 1>, .one = mx4::tile<Vnni, 1, 1>, .prep = prep<R>};
}

}  // namespace gemm

template <bool Vnni>
struct Variants {
  static constexpr Gemv gemv[] = {{4, gemv_tile<Vnni, 4, true>}, {8, gemv_tile<Vnni, 8, true>}};
  // 4 x 3 loads each token's activations once for 3 rows, where 4 x 1 loads them once
  // for each row: 1 KiB per half group of 4 tokens and each row, from L2 where the
  // chunk is larger than L1 (128 or 256 KiB), which is likely what held 4 x 1 back
  // (Zen 3's L2 fills L1 at 32 bytes a cycle). On AMD EPYC Zen 3 (1 thread, 64 tokens)
  // 4 x 3 ran 22-38% faster than 4 x 1 on 4864 x 896, 896 x 4864, 512 x 1024 and
  // 1024 x 512; 4 x 2 came between, 4 x 4 and 4 x 6 behind 4 x 3 (BENCHMARKS.md). Tuned
  // there at 2 threads, 46 of 47 shapes chose it. AVX-512 CPUs without AVX512-VNNI run
  // these kernels under the avx512 table, whose MXFP4 entries ask for 4 x 3 too.
  static constexpr Gemm gemm[] = {gemm::of<Vnni, 4, 1>(), gemm_of<Tiles<Vnni>, 2, 2>(), gemm::of<Vnni, 4, 3>()};
  static DtypeKernels kernels() { return {nullptr, gemv, gemm, kOrder, nullptr, regroup_row}; }
};

}  // namespace mx4

}  // namespace

Kernels avx2_kernels(bool avx_vnni) {
  Kernels k;
  k.f32 = FloatVariants<F32W>::kernels();
  k.bf16 = FloatVariants<Bf16W>::kernels();
  if (cpu_features().f16c) k.fp8 = FloatVariants<Fp8W>::kernels();
  k.mxfp4 = avx_vnni ? mx4::Variants<true>::kernels() : mx4::Variants<false>::kernels();
  return k;
}

}  // namespace mx::matmul_detail
