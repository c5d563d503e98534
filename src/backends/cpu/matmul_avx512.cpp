// AVX-512 matmul kernels (V = 16 lanes). Accumulation scheme: matmul_impl.h.
#include <immintrin.h>

#include <type_traits>

#include "core/cpu_features.h"
#include "backends/cpu/avx512_common.h"
#include "backends/cpu/fp8_avx512.h"
#include "backends/cpu/matmul_impl.h"

namespace mx::matmul_detail {

Kernels avx2_kernels(bool avx_vnni);

namespace {

using avx512::hsum;
using avx512::store_hsums;
using avx512::V;
using avx512::first_n;

// Weight loaders: a full chunk of 16, and a zero-padded partial chunk, as f32.
// s is the chunk's block scale (F8_E4M3 only; ignored otherwise). kBlock: columns
// per scale block (0: the weight has none).
struct F32W {
  using T = float;
  static constexpr int64_t kBlock = 0;
  static __m512 load(const float* p, __m512) { return _mm512_loadu_ps(p); }
  static __m512 load_tail(const float* p, __mmask16 m, __m512) { return _mm512_maskz_loadu_ps(m, p); }
};

// bf16 -> f32 is exact: the bf16 bits are the high half of the f32.
struct Bf16W {
  using T = uint16_t;
  static constexpr int64_t kBlock = 0;
  static __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static __m512 load(const uint16_t* p, __m512) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 load_tail(const uint16_t* p, __mmask16 m, __m512) {
    return widen(_mm256_maskz_loadu_epi16(m, p));
  }
};

// F8_E4M3 (fp8_avx512.h): fp8 * s, rounded once, as dequantize_f32 computes it.
struct Fp8W {
  using T = uint8_t;
  static constexpr int64_t kBlock = 128;
  static MX_INLINE __m512 load(const uint8_t* p, __m512 s) {
    return avx512::fp8_cvt16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), s);
  }
  static MX_INLINE __m512 load_tail(const uint8_t* p, __mmask16 m, __m512 s) {
    return avx512::fp8_cvt16(_mm_maskz_loadu_epi8(m, p), s);
  }
  static MX_INLINE __m512 scale(const Args& a, int64_t row, int64_t kb) {
    return avx512::fp8_scale(a.scales, a.scale_cols, row, kb);
  }
};

// Calls f(i0, i1, sc) for each column block [i0, i1) of rows r0 .. r0+R, sc[r]
// holding row r's scale for the block; one call over the whole row when the weight
// has no block scales. 128 % V == 0, so only the last block has a partial chunk.
template <class L, int R, class F>
MX_INLINE void col_blocks(const Args& a, int64_t r0, F&& f) {
  __m512 sc[R];
  if constexpr (L::kBlock == 0) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) sc[r] = _mm512_setzero_ps();
    f(int64_t(0), a.in, sc);
  } else {
    for (int64_t i0 = 0, kb = 0; i0 < a.in; i0 += L::kBlock, ++kb) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) sc[r] = L::scale(a, r0 + r, kb);
      f(i0, std::min(a.in, i0 + L::kBlock), sc);
    }
  }
}

// y[t0 .. t0+TT, r0 .. r0+R): each output one accumulator, chunks in order. w: the
// weights of row r0 (rows `in` elements apart).
template <class L, int TT, int R>
MX_INLINE void dot_tile_w(const Args& a, const typename L::T* w, int64_t t0, int64_t r0) {
  const int64_t in = a.in;
  const float* x = a.x + t0 * in;
  __m512 acc[TT][R];
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[t][r] = _mm512_setzero_ps();

  auto step = [&](auto load_w, auto load_x) __attribute__((always_inline)) {
    __m512 wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = load_w(r);
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t) {
      __m512 xv = load_x(x + t * in);
      avx512::in_register(xv);  // for its R FMAs (8 x 3: half of them had read memory)
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[t][r] = _mm512_fmadd_ps(wv[r], xv, acc[t][r]);
    }
  };
  col_blocks<L, R>(a, r0, [&](int64_t i0, int64_t i1, const __m512* sc) __attribute__((always_inline)) {
    int64_t i = i0;
    for (; i + V <= i1; i += V)
      step([&](int r) { return L::load(w + r * in + i, sc[r]); },
           [&](const float* p) { return _mm512_loadu_ps(p + i); });
    if (i < i1) {
      const __mmask16 m = first_n(i1 - i);
      step([&](int r) { return L::load_tail(w + r * in + i, m, sc[r]); },
           [&](const float* p) { return _mm512_maskz_loadu_ps(m, p + i); });
    }
  });
  store_hsums(a.y + t0 * a.out + r0, a.out, acc);
}

template <class L, int TT, int R>
void dot_tile(const Args& a, int64_t t0, int64_t r0) {
  dot_tile_w<L, TT, R>(a, static_cast<const typename L::T*>(a.w) + r0 * a.in, t0, r0);
}

// Decode GEMV tile: TT tokens (1, 2, 4), R rows, streaming the weights. Same
// per-output operation sequence as dot_tile<L, TT, R>; it only adds software
// prefetch, one per 64-byte line of each row, a.prefetch bytes ahead (the
// registry's tuned distance; the hardware prefetcher alone falls short on bf16,
// where each line takes twice the work).
template <class L, int TT, int R>
void stream_tile(const Args& a, int64_t t0, int64_t r0) {
  using T = typename L::T;
  constexpr int kStep = 64 / sizeof(T);  // elements per cache line
  const int64_t ahead = a.prefetch / int64_t(sizeof(T));
  const int64_t in = a.in;
  const T* w = static_cast<const T*>(a.w) + r0 * in;
  const float* x = a.x + t0 * in;
  __m512 acc[TT][R];
#pragma GCC unroll 4
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[t][r] = _mm512_setzero_ps();
  // One chunk of V columns at i: R weight vectors, then every token's FMAs.
  auto chunk = [&](int64_t i, const __m512* sc, auto load_w, auto load_x) __attribute__((always_inline)) {
    __m512 wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = load_w(w + r * in + i, sc[r]);
#pragma GCC unroll 4
    for (int t = 0; t < TT; ++t) {
      const __m512 xv = load_x(x + t * in + i);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[t][r] = _mm512_fmadd_ps(wv[r], xv, acc[t][r]);
    }
  };
  auto full_w = [](const T* p, __m512 s) __attribute__((always_inline)) { return L::load(p, s); };
  auto full_x = [](const float* p) __attribute__((always_inline)) { return _mm512_loadu_ps(p); };
  col_blocks<L, R>(a, r0, [&](int64_t i0, int64_t i1, const __m512* sc) __attribute__((always_inline)) {
    int64_t i = i0;
    for (; i + kStep <= i1; i += kStep) {
      prefetch_rows<R>(w, i, ahead, in);
#pragma GCC unroll 4
      for (int c = 0; c < kStep; c += V) chunk(i + c, sc, full_w, full_x);
    }
    for (; i + V <= i1; i += V) chunk(i, sc, full_w, full_x);
    if (i < i1) {
      const __mmask16 m = first_n(i1 - i);
      chunk(i, sc, [m](const T* p, __m512 s) __attribute__((always_inline)) { return L::load_tail(p, m, s); },
            [m](const float* p) __attribute__((always_inline)) { return _mm512_maskz_loadu_ps(m, p); });
    }
  });
  store_hsums(a.y + t0 * a.out + r0, a.out, acc);
}

template <class L>
struct Tiles {
  template <int TT, int R>
  static void tile(const Args& a, int64_t t0, int64_t r0) {
    dot_tile<L, TT, R>(a, t0, r0);
  }
};

// Tile variants (the first of each list is the default). GEMM: TT x R accumulators
// + R weight vectors + 1 x vector <= 32 zmm.
template <class L>
struct FloatVariants {
  // Small batches: 2 x 8 and 4 x 4 tiles (16 accumulators). 8 tokens run as two
  // 4-token passes: the second finds the rows in L1, and 8 x 2 tiles measured
  // 1.2-1.3x slower (two rows per prefetch stream are too few).
  static constexpr Gemv gemv[] = {
      {8, stream_tile<L, 1, 8>, stream_tile<L, 2, 8>, in_subtiles<stream_tile<L, 4, 4>, 4, 8>},
      {4, stream_tile<L, 1, 4>, stream_tile<L, 2, 4>, stream_tile<L, 4, 4>}};
  static constexpr Gemm gemm[] = {gemm_of<Tiles<L>, 4, 6>(), gemm_of<Tiles<L>, 8, 3>()};
  static DtypeKernels kernels() { return {nullptr, gemv, gemm}; }
};

// --- F8_E4M3 -------------------------------------------------------------------
// The F32 scheme over weights formed as fp8 * scale (Fp8W), converting 32 codes at a
// time (one vpmovsxbw zmm): the same FMAs per output as dot_tile<Fp8W>, in the same
// order. NaN codes are found with one compare per 32 codes and patched in on a
// branch that real checkpoints never take. (GEMV and leftover rows convert on the
// fly; GEMM tiles convert their rows once per chunk of tokens, below.)
namespace fp8 {

MX_INLINE void cvt32(const uint8_t* p, __m512 s, __m512& lo, __m512& hi) {
  avx512::fp8_cvt32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), s, lo, hi);
}

// y[t0 .. t0+TT, r0 .. r0+R); PF: software prefetch a.prefetch bytes ahead on each
// row, one per 64-byte line (the GEMV tile).
template <int TT, int R, bool PF>
void tile(const Args& a, int64_t t0, int64_t r0) {
  const int64_t in = a.in;
  const uint8_t* w = static_cast<const uint8_t*>(a.w) + r0 * in;
  const float* x = a.x + t0 * in;
  const int64_t ahead = PF ? a.prefetch : 0;
  __m512 acc[TT][R];
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[t][r] = _mm512_setzero_ps();
  for (int64_t i0 = 0, kb = 0; i0 < in; i0 += Fp8W::kBlock, ++kb) {
    const int64_t i1 = std::min(in, i0 + Fp8W::kBlock);
    __m512 sc[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) sc[r] = Fp8W::scale(a, r0 + r, kb);
    int64_t i = i0;
    for (; i + 32 <= i1; i += 32) {
      if (PF) prefetch_rows<R>(w, i, ahead, in);
      __m512 wv[R][2];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) cvt32(w + r * in + i, sc[r], wv[r][0], wv[r][1]);
#pragma GCC unroll 2
      for (int c = 0; c < 2; ++c)
#pragma GCC unroll 8
        for (int t = 0; t < TT; ++t) {
          const __m512 xv = _mm512_loadu_ps(x + t * in + i + 16 * c);
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) acc[t][r] = _mm512_fmadd_ps(wv[r][c], xv, acc[t][r]);
        }
    }
    // The row's last < 32 columns: one chunk of 16 and/or a masked partial chunk.
    for (; i < i1; i += V) {
      const __mmask16 m = first_n(i1 - i);
      __m512 wv[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) wv[r] = Fp8W::load_tail(w + r * in + i, m, sc[r]);
#pragma GCC unroll 8
      for (int t = 0; t < TT; ++t) {
        const __m512 xv = _mm512_maskz_loadu_ps(m, x + t * in + i);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[t][r] = _mm512_fmadd_ps(wv[r], xv, acc[t][r]);
      }
    }
  }
  store_hsums(a.y + t0 * a.out + r0, a.out, acc);
}

// GEMM: the tile's R rows are converted once per chunk of tokens (prep) into f32
// (fp8 * scale, the exact dequantized values) in a per-thread buffer, then the F32
// tiles run on it: the same operations as the F32 matmul of the dequantized weight,
// without converting each weight vector once per token tile.
thread_local PrepBuffer t_buf;

template <int R>
void prep(const Args& a, int64_t, int64_t r0) {
  const int64_t in = a.in;
  float* dst = static_cast<float*>(t_buf.get(size_t(R * in) * sizeof(float)));
  for (int r = 0; r < R; ++r) {
    const uint8_t* w = static_cast<const uint8_t*>(a.w) + (r0 + r) * in;
    float* d = dst + r * in;
    for (int64_t i0 = 0, kb = 0; i0 < in; i0 += Fp8W::kBlock, ++kb) {
      const int64_t i1 = std::min(in, i0 + Fp8W::kBlock);
      const __m512 sc = Fp8W::scale(a, r0 + r, kb);
      int64_t i = i0;
      for (; i + 32 <= i1; i += 32) {
        __m512 lo, hi;
        cvt32(w + i, sc, lo, hi);
        _mm512_storeu_ps(d + i, lo);
        _mm512_storeu_ps(d + i + 16, hi);
      }
      for (; i < i1; i += V) {
        const __mmask16 m = first_n(i1 - i);
        _mm512_mask_storeu_ps(d + i, m, Fp8W::load_tail(w + i, m, sc));
      }
    }
  }
}

template <int TT, int R>
void on_rows(const Args& a, int64_t t0, int64_t r0) {
  dot_tile_w<F32W, TT, R>(a, static_cast<const float*>(t_buf.buf.data()), t0, r0);
}

template <int TT, int R>
constexpr Gemm gemm() {
  return {TT, R, on_rows<TT, R>, on_rows<1, R>, tile<TT, 1, false>, tile<1, 1, false>, prep<R>};
}

// Small batches: sub-tiles of 4 rows (2 weight vectors per row + TT x 4 accumulators).
constexpr Gemv kGemv[] = {{8, tile<1, 8, true>, in_subtiles<tile<2, 4, true>, 4, 8>, in_subtiles<tile<4, 4, true>, 4, 8>},
                          {4, tile<1, 4, true>, tile<2, 4, true>, tile<4, 4, true>}};
constexpr Gemm kGemm[] = {gemm<4, 6>(), gemm<8, 3>()};

}  // namespace fp8

// --- MXFP4 (VNNI) -------------------------------------------------------------
// A 16-block group of one row is 256 packed bytes: four 64-byte loads of 4 blocks.
// Nibbles -> u8 (2 * E2M1 value + 12) by vpshufb; activations are int8, so
// vpdpbusd(u8 weights, s8 x) sums 4 products per int32 lane; the +12 offset is
// removed per block with sum12 = 12 * sum(q). The 128-bit lane k of load j holds
// block 4j + k (low nibbles: its even elements, high nibbles: its odd ones, which
// is how QuantAct lays out q); after the 4 -> 1 lane reduction, int32 position
// 4k + j holds block 4j + k. The accumulators keep that order (kOrder; QuantAct's
// s and sum12 are stored in it, scale bytes are shuffled into it) and one permute
// restores natural lane order before the tree (matmul_impl.h).
namespace mx4 {

constexpr uint8_t kOrder[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

struct Group {
  __m512i lo[4], hi[4];  // u8 weights: even / odd elements of blocks 4j .. 4j+3
  __m512 ws;             // 2^(e - 127) per block, kOrder
};

template <bool Tail>
MX_INLINE void load_group(const uint8_t* wp, const uint8_t* sp, int nblk, Group& g) {
  const __m512i lut = _mm512_broadcast_i32x4(
      _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  const __m512i m0f = _mm512_set1_epi8(0x0F);
  if constexpr (Tail)
    for (int j = 0; j < 4; ++j) g.lo[j] = g.hi[j] = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    __m512i v;
    if constexpr (Tail) {
      // Loads past the row's last block are skipped (group_step skips them too).
      const int nb = nblk - 4 * j;
      if (nb <= 0) break;
      const __mmask64 m = nb >= 4 ? ~__mmask64(0) : (__mmask64(1) << (16 * nb)) - 1;
      v = _mm512_maskz_loadu_epi8(m, wp + 64 * j);
    } else {
      v = _mm512_loadu_si512(wp + 64 * j);
    }
    g.lo[j] = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m0f));
    g.hi[j] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m0f));
  }
  __m128i e8 = Tail ? _mm_maskz_loadu_epi8(first_n(nblk), sp)
                    : _mm_loadu_si128(reinterpret_cast<const __m128i*>(sp));
  e8 = _mm_shuffle_epi8(e8, _mm_loadu_si128(reinterpret_cast<const __m128i*>(kOrder)));
  __m512i bits = _mm512_slli_epi32(_mm512_cvtepu8_epi32(e8), 23);
  bits = _mm512_mask_mov_epi32(bits, _mm_cmpeq_epi8_mask(e8, _mm_setzero_si128()),
                               _mm512_setzero_si512());  // 2^-127 flushed (mx_scale)
  bits = _mm512_mask_mov_epi32(bits, _mm_cmpeq_epi8_mask(e8, _mm_set1_epi8(-1)),
                               _mm512_set1_epi32(0x7FC00000));  // NaN
  g.ws = _mm512_castsi512_ps(bits);
}

// acc + float(d - sum12) * ws * s per lane: a block's integer dot product less its +12
// offset's share (exact in f32), times its weight and activation scales, the one FMA per
// block and lane of the scheme (matmul_impl.h); group_step and regrouped_step both end so.
MX_INLINE __m512 add_blocks(__m512 acc, __m512i d, __m512i sum12, __m512 ws, __m512 s) {
  return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(d, sum12)), ws), s, acc);
}

// acc[p] = fma(float(d) * ws, s, acc[p]) for the 16 blocks of one group; nj: the
// 4-block loads present (4 but in a row's last group).
MX_INLINE __m512 group_step(__m512 acc, const Group& g, const int8_t* xq, const float* xs,
                            const int32_t* xsum, int nj = 4) {
  __m512i p[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    if (j >= nj) {
      p[j] = _mm512_setzero_si512();
      continue;
    }
    const __m512i e = _mm512_loadu_si512(xq + 128 * j), o = _mm512_loadu_si512(xq + 128 * j + 64);
    p[j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), g.lo[j], e), g.hi[j], o);
  }
  const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(p[0], p[1]), _mm512_unpackhi_epi32(p[0], p[1]));
  const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2], p[3]), _mm512_unpackhi_epi32(p[2], p[3]));
  const __m512i sums = _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
  return add_blocks(acc, sums, _mm512_loadu_si512(xsum), g.ws, _mm512_loadu_ps(xs));
}

// Regrouping (the GEMM, and the tiles of 4 or more tokens that read the packed rows):
// group_step spends 9 shuffles and adds per token and row on the 4 -> 1 lane
// reduction, as many vector operations as its 8 vpdpbusd. Regrouped, int32 lane
// 4k + j of every weight vector holds 4 bytes of block 4j + k (kOrder), and the
// activations are regrouped the same way once per call (regroup_row, QuantAct::qg),
// so the 8 vpdpbusd of a token and row leave each block's sum whole in its lane, for
// 16 shuffles per row and group. d_b is an exact integer either way, so every
// output keeps its bits (matmul_impl.h).

// x[j]'s 128-bit lane k belongs to block 4j + k; out[i] takes int32 i of each:
// lane 4k + j of out[i] = int32 4k + i of x[j] (a 4 x 4 transpose per 128-bit lane).
MX_INLINE void regroup4(const __m512i* x, __m512i* out) {
  const __m512i a0 = _mm512_unpacklo_epi32(x[0], x[1]), a1 = _mm512_unpackhi_epi32(x[0], x[1]);
  const __m512i a2 = _mm512_unpacklo_epi32(x[2], x[3]), a3 = _mm512_unpackhi_epi32(x[2], x[3]);
  out[0] = _mm512_unpacklo_epi64(a0, a2);
  out[1] = _mm512_unpackhi_epi64(a0, a2);
  out[2] = _mm512_unpacklo_epi64(a1, a3);
  out[3] = _mm512_unpackhi_epi64(a1, a3);
}

// A group's 4 vectors of evens (lo) and of odds (hi), regrouped: vector 4h + i (h = 0:
// evens, 1: odds) is regroup4's out[i], stored at dst + 64 (4h + i).
MX_INLINE void store_regrouped(const __m512i* lo, const __m512i* hi, void* dst) {
  __m512i v[8];
  regroup4(lo, v);
  regroup4(hi, v + 4);
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m) _mm512_storeu_si512(static_cast<char*>(dst) + 64 * m, v[m]);
}

// One token row of q (QuantAct: group G's load j at G * 512 + 128 j, evens then odds).
void regroup_row(const int8_t* q, int64_t nbp, int8_t* qg) {
  for (int64_t G = 0; G < nbp / 16; ++G) {
    __m512i lo[4], hi[4];
    for (int j = 0; j < 4; ++j) {
      lo[j] = _mm512_loadu_si512(q + G * 512 + 128 * j);
      hi[j] = _mm512_loadu_si512(q + G * 512 + 128 * j + 64);
    }
    store_regrouped(lo, hi, qg + G * 512);
  }
}

// A row's unpacked group, regrouped: 8 vectors at w (512 bytes), its scales at ws.
MX_INLINE void store_regrouped(const Group& g, uint8_t* w, float* ws) {
  store_regrouped(g.lo, g.hi, w);
  _mm512_storeu_ps(ws, g.ws);
}

// acc[t][r] += one group for TT tokens and R rows: row r's regrouped vectors at
// w + 512 r, its scales at ws + 16 r; token t's regrouped activations at
// xg + t * stride, its s and sum12 at xs / xsum + t * nbp. Each sum's 8 vpdpbusd lie
// TT x R instructions apart, which hides their latency.
template <int TT, int R>
MX_INLINE void regrouped_step(__m512 (&acc)[TT][R], const uint8_t* w, const float* ws, const int8_t* xg,
                              int64_t stride, const float* xs, const int32_t* xsum, int64_t nbp) {
  __m512i d[TT][R];
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) d[t][r] = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m) {
    __m512i wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = _mm512_loadu_si512(w + r * 512 + 64 * m);
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t) {
      __m512i x = _mm512_loadu_si512(xg + t * stride + 64 * m);
      avx512::in_register(x);  // for its R vpdpbusd (4 x 3: else 120 loads per 96 of them)
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) d[t][r] = _mm512_dpbusd_epi32(d[t][r], wv[r], x);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t) {
    const __m512i sum12 = _mm512_loadu_si512(xsum + t * nbp);
    const __m512 s = _mm512_loadu_ps(xs + t * nbp);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      acc[t][r] = add_blocks(acc[t][r], d[t][r], sum12, _mm512_loadu_ps(ws + 16 * r), s);
  }
}

// The accumulators back to natural lane order, then the tree into y.
template <int TT, int R>
MX_INLINE void store_unpermuted(const Args& a, int64_t t0, int64_t r0, __m512 (&acc)[TT][R]) {
  const __m512i unperm = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kOrder)));
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[t][r] = _mm512_permutexvar_ps(unperm, acc[t][r]);
  store_hsums(a.y + t0 * a.out + r0, a.out, acc);
}

// y[t0 .. t0+TT, r0 .. r0+R); PF: software prefetch a.prefetch bytes ahead on each
// row (the GEMV tile).
template <int TT, int R, bool PF>
void tile(const Args& a, int64_t t0, int64_t r0) {
  const MxTileOperands o(a, t0, r0);
  const int64_t ng = o.nb / 16;
  const int tail = int(o.nb % 16);
  const QuantAct& qa = *a.qa;
  const int64_t ahead = a.prefetch;
  if (PF && ahead > 0) prefetch_next_scales<R>(o.sc, o.nb);
  __m512 acc[TT][R];
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[t][r] = _mm512_setzero_ps();
  auto group = [&](int64_t G, auto tail_tag) __attribute__((always_inline)) {
    constexpr bool Tail = decltype(tail_tag)::value;
    Group g[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const uint8_t* wr = o.w + r * o.rb + G * 256;
      if (PF && ahead > 0) prefetch_lines(prefetch_target(o.w + r * o.rb, G * 256, ahead, o.rb, R), 256);
      load_group<Tail>(wr, o.sc + r * o.nb + G * 16, tail, g[r]);
    }
    // Regrouped: 16 shuffles per row, where group_step's reduction takes 9 per token.
    if constexpr (TT >= kMinRegroupTokens) {
      alignas(64) uint8_t wg[R * 512];
      alignas(64) float ws[R * 16];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) store_regrouped(g[r], wg + r * 512, ws + r * 16);
      regrouped_step<TT, R>(acc, wg, ws, qa.qg + t0 * qa.q_stride + G * 512, qa.q_stride, o.xs + G * 16, o.xsum + G * 16,
                            qa.nbp);
    } else {
#pragma GCC unroll 8
      for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
          acc[t][r] = group_step(acc[t][r], g[r], o.xq + t * qa.q_stride + G * 512, o.xs + t * qa.nbp + G * 16,
                                 o.xsum + t * qa.nbp + G * 16, Tail ? (tail + 3) / 4 : 4);
    }
  };
  for (int64_t G = 0; G < ng; ++G) group(G, std::false_type{});
  if (tail) group(ng, std::true_type{});
  store_unpermuted(a, t0, r0, acc);
}

// --- GEMM: rows unpacked and regrouped once per chunk ---
// A GEMV tile unpacks its rows' nibbles for every TT tokens; the GEMM unpacks and
// regroups a tile's R rows once per chunk of tokens (prep, into a per-thread buffer,
// with load_group's operations), and its tiles hold TT x R sums in registers while
// the weights and activations stream from L1 / L2.

namespace gemm {

// The prepared rows of the tile this thread computes: group G of row r is 8 vectors
// of u8 weights at w + (G * R + r) * 512 bytes, its 16 block scales (kOrder) at
// ws + (G * R + r) * 16. Past a row's last block (the last group's tail) the weights
// are 0 or 12 (load_group) and the scales 0, as q and sum12 are 0 there: they add +0.
thread_local PrepBuffer t_buf;
thread_local MxRows t_rows;

template <int R>
void prep(const Args& a, int64_t, int64_t r0) {
  const MxRowOperands o(a, r0);
  const int64_t nb = o.nb, groups = (nb + 15) / 16;
  t_rows.place(t_buf, size_t(groups * R) * 512, size_t(groups * R) * 16);
  auto group = [&](int64_t G, int r, auto tail_tag) __attribute__((always_inline)) {
    Group g;
    load_group<decltype(tail_tag)::value>(o.w + r * o.rb + G * 256, o.sc + r * nb + G * 16, int(nb % 16), g);
    store_regrouped(g, t_rows.w + (G * R + r) * 512, t_rows.ws + (G * R + r) * 16);
  };
  for (int r = 0; r < R; ++r) {
    int64_t G = 0;
    for (; G < nb / 16; ++G) group(G, r, std::false_type{});
    if (G < groups) group(G, r, std::true_type{});
  }
}

// y[t0 .. t0+TT, r0 .. r0+R) from the rows prep made on this thread.
template <int TT, int R>
void tile(const Args& a, int64_t t0, int64_t r0) {
  const QuantAct& qa = *a.qa;
  const int64_t groups = qa.nbp / 16;
  const int8_t* xq = qa.qg + t0 * qa.q_stride;
  const float* xs = qa.s + t0 * qa.nbp;
  const int32_t* xsum = qa.sum12 + t0 * qa.nbp;
  __m512 acc[TT][R];
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[t][r] = _mm512_setzero_ps();
  for (int64_t G = 0; G < groups; ++G)
    regrouped_step<TT, R>(acc, t_rows.w + G * R * 512, t_rows.ws + G * R * 16, xq + G * 512, qa.q_stride,
                          xs + G * 16, xsum + G * 16, qa.nbp);
  store_unpermuted(a, t0, r0, acc);
}

// full / tok1 read the rows prep made just before (drive_rows calls prep, then them,
// for each block of R rows); row1 / one, for rows left over by the tile shape, read
// the packed weights as the GEMV does.
template <int TT, int R>
constexpr Gemm of() {
  // The tiles (tok1 too) read QuantAct::qg: a GEMM of TT tokens runs on calls of TT or more.
  static_assert(TT >= kMinRegroupTokens);
  return {.tokens = TT, .rows = R, .full = tile<TT, R>, .tok1 = tile<1, R>, .row1 = mx4::tile<TT, 1, false>,
          .one = mx4::tile<1, 1, false>, .prep = prep<R>};
}

}  // namespace gemm

// The activation quantizer of matmul.cpp (quantize_row_mx), 16 lanes wide: the
// same max (exact), divisions, products and round-to-nearest-even conversions.
void quantize_row(const float* x, int64_t in, int64_t nbp, const uint8_t* inv_order, int8_t* q,
                  float* s, int32_t* sum12) {
  const int64_t nb = in / 32;
  const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 fmax = _mm512_set1_ps(3.40282347e38f);
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t b = 0; b < nbp; ++b) {
    const int64_t pos = (b & ~int64_t(15)) + inv_order[b & 15];
    int8_t* ev = q + (b >> 2) * 128 + (b & 3) * 16;
    int8_t* od = ev + 64;
    if (b >= nb) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(ev), _mm_setzero_si128());
      _mm_storeu_si128(reinterpret_cast<__m128i*>(od), _mm_setzero_si128());
      s[pos] = 0.0f;
      sum12[pos] = 0;
      continue;
    }
    const __m512 a0 = _mm512_loadu_ps(x + b * 32), a1 = _mm512_loadu_ps(x + b * 32 + 16);
    const __m512 v0 = _mm512_and_ps(a0, absmask), v1 = _mm512_and_ps(a1, absmask);
    const bool bad = (_mm512_cmp_ps_mask(v0, fmax, _CMP_NLE_UQ) | _mm512_cmp_ps_mask(v1, fmax, _CMP_NLE_UQ)) != 0;
    const float amax = bad ? 0.0f : _mm512_reduce_max_ps(_mm512_max_ps(v0, v1));
    if (bad || amax == 0.0f) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(ev), _mm_setzero_si128());
      _mm_storeu_si128(reinterpret_cast<__m128i*>(od), _mm_setzero_si128());
      s[pos] = bad ? __builtin_nanf("") : 0.0f;
      sum12[pos] = 0;
      continue;
    }
    const __m512 vinv = _mm512_set1_ps(127.0f / amax);
    s[pos] = amax / 127.0f * 0.5f;
    const __m512i qe = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_permutex2var_ps(a0, ie, a1), vinv));
    const __m512i qo = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_permutex2var_ps(a0, io, a1), vinv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(ev), _mm512_cvtsepi32_epi8(qe));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(od), _mm512_cvtsepi32_epi8(qo));
    sum12[pos] = 12 * _mm512_reduce_add_epi32(_mm512_add_epi32(qe, qo));
  }
}

// GEMM: TT x R sums in registers (gemm::tile; 4 x 3 the default: 24 zmm of sums).
// Small batches: sub-tiles of 2 rows (9 zmm of unpacked weights per row + TT x 2
// accumulators; 4 tokens regrouped). 8 tokens go as two 4-token tiles, the second on
// rows still in L1: measured 0.9-1.8x an 8-token tile of 1 row on 4 shapes, faster
// on 3 (BENCHMARKS.md, "MXFP4 GEMM").
constexpr Gemv kGemv[] = {
    {8, tile<1, 8, true>, in_subtiles<tile<2, 2, true>, 2, 8>, in_subtiles<tile<4, 2, true>, 2, 8>},
    {4, tile<1, 4, true>, in_subtiles<tile<2, 2, true>, 2, 4>, in_subtiles<tile<4, 2, true>, 2, 4>}};
constexpr Gemm kGemm[] = {gemm::of<4, 3>(), gemm::of<4, 2>(), gemm::of<6, 2>(), gemm::of<8, 1>()};

}  // namespace mx4

}  // namespace

Kernels avx512_kernels() {
  Kernels k;
  k.f32 = FloatVariants<F32W>::kernels();
  k.bf16 = FloatVariants<Bf16W>::kernels();
  if (cpu_features().avx512bf16) {
    k.bf16_dot = avx512_bf16dot_kernels();
    k.fp8_dot = avx512_fp8dot_kernels();
    k.bf16_amx = amx_bf16_kernels();
    k.fp8_amx = amx_fp8_kernels();
  }
  k.fp8 = {nullptr, fp8::kGemv, fp8::kGemm};
  if (cpu_features().avx512vnni)
    k.mxfp4 = {nullptr, mx4::kGemv, mx4::kGemm, mx4::kOrder, mx4::quantize_row, mx4::regroup_row};
  else k.mxfp4 = avx2_kernels(cpu_features().avx_vnni).mxfp4;
  return k;
}

}  // namespace mx::matmul_detail
