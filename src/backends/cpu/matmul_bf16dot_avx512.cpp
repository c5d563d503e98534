// BF16 and F8_E4M3 weights times bf16 activations on AVX512-BF16 (vdpbf16ps): 32
// multiply-adds per instruction. The accumulation scheme and why it keeps batch
// invariance: matmul_impl.h ("Weights with bf16 activations"). Intel SDM,
// VDPBF16PS / VCVTNE2PS2BF16.
//
// Why: the f32-activation kernels widen each weight (vpmovzxwd + vpslld) before an
// FMA of 16 lanes, two extra uops per 16 weights on the ports the FMAs use; here a
// 64-byte load feeds one instruction of 32 products, so prefill does twice the
// multiply-adds per instruction and decode keeps fewer uops in flight per line.
// (That holds on AMD Zen 4/5; on Intel Xeon vdpbf16ps issues at a quarter of the
// FMA rate, so the GEMM has FMA tiles with the same bits: namespace fma below.)
// FP8 weights are dequantized to bf16 (fp8 * block scale, rounded once to f32 as
// dequantize_f32 does, then to bf16) on the fly in the GEMV and once per chunk of
// tokens for a GEMM tile's rows, as vLLM's CPU path dequantizes block FP8 to bf16.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "backends/cpu/avx512_common.h"
#include "backends/cpu/bf16_fma_avx512.h"
#include "backends/cpu/fp8_avx512.h"
#include "backends/cpu/matmul_impl.h"

namespace mx::matmul_detail {
namespace {

using avx512::first_n;
using avx512::store_hsums;

constexpr int K = 32;  // bf16 elements per vdpbf16ps

// One token row to bf16, round to nearest even (vcvtne2ps2bf16), zero-padded to stride.
void round_row(const float* x, int64_t in, int64_t stride, uint16_t* dst) {
  int64_t i = 0;
  for (; i + K <= in; i += K) {
    const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(dst + i, __m512i(b));
  }
  if (i < in) {
    const int64_t n = in - i;
    const __mmask16 lo = first_n(n), hi = first_n(n - 16);
    const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, x + i + 16), _mm512_maskz_loadu_ps(lo, x + i));
    _mm512_storeu_si512(dst + i, __m512i(b));  // lanes past `in` are +0
    i += K;
  }
  if (i < stride) std::memset(dst + i, 0, size_t(stride - i) * 2);
}

MX_INLINE __m512bh load_bh(const uint16_t* p) { return __m512bh(_mm512_loadu_si512(p)); }

// Weight sources: R rows from r0, 32 elements at column i as bf16, or the row's
// last in % 32 (mask m) with zeros past its end.
struct Bf16Src {
  using T = uint16_t;
  const uint16_t* w;  // row r0
  int64_t in;
  MX_INLINE void block(int64_t) {}
  MX_INLINE __m512bh load(int r, int64_t i) const { return load_bh(w + r * in + i); }
  MX_INLINE __m512bh tail(int r, int64_t i, __mmask32 m) const {
    return __m512bh(_mm512_maskz_loadu_epi16(m, w + r * in + i));
  }
};

// FP8 rows dequantized as they are read. A 32-column chunk never straddles a
// 128-column scale block, and within one block every code of a row maps to the
// same bf16(fp8 * s): block(i) tabulates that map for the (at most two) 128-row
// blocks the R rows lie in, every 4 chunks, with fp8_cvt16's operations on the
// 128 codes of one sign, and a chunk is then a table lookup (two vpermt2w and a
// blend) plus a flip of the sign bit, since rounding to nearest even is symmetric.
// Two: the R rows may straddle two 128-row scale blocks (else they lie in one, and
// every row reads tab[0]: the compiler keeps those four tables in registers, where a
// row-dependent pick kept them on the stack and reloaded them per chunk).
template <int R, bool Two = true>
struct Fp8Src {
  using T = uint8_t;
  const uint8_t* w;
  int64_t in;
  const Args& a;
  int64_t r0, rb0;
  __m512i tab[2][4];  // [row block - rb0][32 entries each]: codes 0..127
  Fp8Src(const Args& args, int64_t row0)
      : w(static_cast<const uint8_t*>(args.w) + row0 * args.in), in(args.in), a(args), r0(row0), rb0(row0 >> 7) {}
  MX_INLINE void tabulate(int64_t rb, int64_t kb, __m512i (&t)[4]) const {
    const __m512 s = avx512::fp8_scale(a.scales, a.scale_cols, rb << 7, kb);
    const __m128i step = _mm_set1_epi8(16);
    __m128i codes = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m512 lo = avx512::fp8_cvt16(codes, s);
      codes = _mm_add_epi8(codes, step);
      const __m512 hi = avx512::fp8_cvt16(codes, s);
      codes = _mm_add_epi8(codes, step);
      t[j] = __m512i(_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
  MX_INLINE void block(int64_t i) {
    if (i & 127) return;
    tabulate(rb0, i >> 7, tab[0]);
    if (Two && ((r0 + R - 1) >> 7) != rb0) tabulate(rb0 + 1, i >> 7, tab[1]);
  }
  MX_INLINE __m512bh cvt(int r, __m256i b) const {
    const __m512i(&t)[4] = tab[Two ? ((r0 + r) >> 7) - rb0 : 0];
    const __m512i c = _mm512_cvtepu8_epi16(b);
    const __m512i lo = _mm512_permutex2var_epi16(t[0], c, t[1]);  // codes & 63 (index bits 5:0)
    const __m512i hi = _mm512_permutex2var_epi16(t[2], c, t[3]);
    const __m512i v = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(c, _mm512_set1_epi16(0x40)), lo, hi);
    // v ^ (code << 8 & 0x8000): a negative code flips the sign of bf16(|code| * s),
    // whatever the sign of s
    return __m512bh(_mm512_ternarylogic_epi32(v, _mm512_slli_epi16(c, 8), _mm512_set1_epi16(int16_t(0x8000)), 0x78));
  }
  MX_INLINE __m512bh load(int r, int64_t i) const {
    return cvt(r, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * in + i)));
  }
  // Lanes past the row are +0, as Bf16Src's (code 0 would give bf16(0 * s): -0 for a
  // negative scale, NaN for an inf one).
  MX_INLINE __m512bh tail(int r, int64_t i, __mmask32 m) const {
    return __m512bh(_mm512_maskz_mov_epi16(m, __m512i(cvt(r, _mm256_maskz_loadu_epi8(m, w + r * in + i)))));
  }
};

// Columns [k0, k1) of a tile whose rows are split in column blocks (chunk_rows):
// the accumulators start from and go back to `keep` (TT x R vectors) between
// blocks, which moves them without changing a bit, so each output still sees
// exactly the sequence below.
struct Cols {
  int64_t k0, k1;
  float* keep;  // 16 floats per output; null: the whole row in one pass
};

// A tile's accumulators at the start of its columns: +0, or those kept by the block before.
template <int TT, int R>
MX_INLINE void start(Cols cols, __m512 (&acc)[TT][R]) {
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      acc[t][r] = cols.k0 > 0 ? _mm512_loadu_ps(cols.keep + (t * R + r) * 16) : _mm512_setzero_ps();
}

// ... and at the end of columns [.., k_end): kept for the next block, or the tree's sums out.
template <int TT, int R>
MX_INLINE void finish(const Args& a, Cols cols, int64_t k_end, int64_t t0, int64_t r0, const __m512 (&acc)[TT][R]) {
  if (cols.keep && k_end < a.in) {
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) _mm512_storeu_ps(cols.keep + (t * R + r) * 16, acc[t][r]);
    return;
  }
  store_hsums(a.y + t0 * a.out + r0, a.out, acc);
}

// y[t0 .. t0+TT, r0 .. r0+R) from the weight source's rows. PF: software prefetch
// a.prefetch bytes ahead on each row, one 64-byte line per 64 bytes of weights
// (every chunk of bf16, every other of FP8; the GEMV tiles, as stream_tile in
// matmul_avx512.cpp).
template <int TT, int R, bool PF, class Src>
MX_INLINE void dot_rows(const Args& a, Src src, int64_t t0, int64_t r0, Cols cols = {0, 0, nullptr}) {
  using T = typename Src::T;
  // Columns [cols.k0, k_end); the prefetch (GEMV tiles: never column-blocked) steps
  // over whole rows of a.in.
  const int64_t in = a.in, k_end = cols.keep ? cols.k1 : a.in, xs = a.xb_stride;
  const uint16_t* x = a.xb + t0 * xs;
  const int64_t ahead = PF ? a.prefetch / int64_t(sizeof(T)) : 0;
  __m512 acc[TT][R];
  start(cols, acc);
  auto chunk = [&](int64_t i, auto load_w) __attribute__((always_inline)) {
    src.block(i);
    __m512bh wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = load_w(r, i);
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t) {
      const __m512bh xv = load_bh(x + t * xs + i);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[t][r] = _mm512_dpbf16_ps(acc[t][r], wv[r], xv);
    }
  };
  int64_t i = cols.k0;
  for (; i + K <= k_end; i += K) {
    if (PF) prefetch_rows<R>(src.w, i, ahead, in);
    chunk(i, [&src](int r, int64_t j) __attribute__((always_inline)) { return src.load(r, j); });
  }
  if (i < k_end) {
    const __mmask32 m = __mmask32((uint64_t(1) << (k_end - i)) - 1);
    chunk(i, [&src, m](int r, int64_t j) __attribute__((always_inline)) { return src.tail(r, j, m); });
  }
  finish(a, cols, k_end, t0, r0, acc);
}

// A GEMM tile's rows over a chunk of tokens [c0, c1) (Gemm::chunk). Rows longer
// than 2 * kColBlock go in column blocks of kColBlock: the block's R rows (R x 2
// KiB of bf16, R x 4 KiB widened for the FMA tiles) then stay in L1 while every
// token tile of the chunk passes, where a whole long row set would not (the f32
// scheme's rows of 4864 bf16 ran at ~0.7x the speed of rows of 896), and only the
// activations stream from L2.
constexpr int64_t kColBlock = 1024;  // a multiple of K
constexpr bool column_blocked(int64_t in) { return in > 2 * kColBlock; }

template <int TT, int R, class Tiles>
MX_INLINE void chunk_rows(const Args& a, const Tiles& tiles, int64_t c0, int64_t c1, int64_t r0) {
  const int64_t n = c1 - c0, full = n / TT * TT;
  const bool blocked = column_blocked(a.in);  // else one pass over whole rows, nothing kept
  thread_local std::vector<float> keep;
  if (blocked && keep.size() < size_t(n * R * 16)) keep.resize(size_t(n * R * 16));
  auto cols = [&](int64_t k0, int64_t k1, int64_t t) {
    return blocked ? Cols{k0, k1, keep.data() + (t - c0) * R * 16} : Cols{0, 0, nullptr};
  };
  for (int64_t k0 = 0; k0 < a.in; k0 += kColBlock) {
    const int64_t k1 = a.in - k0 < 2 * kColBlock ? a.in : k0 + kColBlock;  // no short last block
    int64_t t = c0;
    for (; t < c0 + full; t += TT) tiles.template run<TT>(a, t, r0, cols(k0, k1, t));
    for (; t < c1; ++t) tiles.template run<1>(a, t, r0, cols(k0, k1, t));
    if (k1 == a.in) break;
  }
}

// Calls put(r, i, m, v) with the 32 columns at i of each of the source's R rows as
// bf16, over the whole row: m masks the columns inside it (the last 32 are zero past it).
template <int R, class Src, class Put>
MX_INLINE void each_chunk(const Args& a, Src src, Put put) {
  int64_t i = 0;
  for (; i + K <= a.in; i += K) {
    src.block(i);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) put(r, i, ~__mmask32(0), src.load(r, i));
  }
  if (i < a.in) {
    const __mmask32 m = __mmask32((uint64_t(1) << (a.in - i)) - 1);
    src.block(i);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) put(r, i, m, src.tail(r, i, m));
  }
}

// chunk_rows' tiles: the vdpbf16ps ones on a weight source (fma::ChunkFma: on FMAs).
template <int R, class Src>
struct ChunkDot {
  Src src;
  template <int TT>
  MX_INLINE void run(const Args& a, int64_t t0, int64_t r0, Cols cols) const {
    dot_rows<TT, R, false>(a, src, t0, r0, cols);
  }
};

template <int TT, int R, bool PF>
void bf16_tile(const Args& a, int64_t t0, int64_t r0) {
  dot_rows<TT, R, PF>(a, Bf16Src{static_cast<const uint16_t*>(a.w) + r0 * a.in, a.in}, t0, r0);
}

// The FP8 GEMV on AVX512-VBMI: dot_rows' sequence for Fp8Src's rows (R rows in one
// 128-row scale block), but 64 codes at a time looked up in the same table split into
// bytes: vpermt2b finds a code's low and high bf16 byte among 128 (its bits 6:0), the
// sign bit flips the high byte's, and vpunpck{l,h}bw pair the bytes into the bf16 words
// of columns [i, i + 32) and [i + 32, i + 64) (the codes' qwords ordered 0 4 1 5 2 6 3 7
// first, so each 128-bit lane's low and high halves are those columns). Two vpermt2b,
// one vpermq and two unpacks per 64 codes on the shuffle port, where Fp8Src::cvt spends
// two vpermt2w (2 cycles each on Intel Xeon), a vpmovzxbw and a vptestmw per 32. The
// same words in the same order reach the same vdpbf16ps, so the same bits; a row's last
// 32-column chunk and its tail go through Fp8Src::load / tail as in dot_rows.
template <int TT, int R, bool PF>
__attribute__((target("avx512vbmi"))) void fp8_tile_vbmi(const Args& a, int64_t t0, int64_t r0) {
  Fp8Src<R, false> src(a, r0);
  const int64_t in = a.in, xs = a.xb_stride, ahead = PF ? a.prefetch : 0;
  const uint16_t* x = a.xb + t0 * xs;
  __m512 acc[TT][R];
  start(Cols{0, 0, nullptr}, acc);
  __m512i tb[4];  // the table's bytes: low of codes 0..63, of 64..127; high of 0..63, of 64..127
  const __m512i order = _mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7), sign = _mm512_set1_epi8(int8_t(0x80));
  auto dot = [&](int r, __m512bh v, int64_t i) __attribute__((always_inline)) {
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t) acc[t][r] = _mm512_dpbf16_ps(acc[t][r], v, load_bh(x + t * xs + i));
  };
  int64_t i = 0;
  for (; i + 2 * K <= in; i += 2 * K) {
    if (!(i & 127)) {
      src.block(i);
      for (int h = 0; h < 2; ++h) {
        const __m512i* t = src.tab[0] + 2 * h;  // words of codes 64h .. 64h + 63
        tb[h] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(t[0])), _mm512_cvtepi16_epi8(t[1]), 1);
        tb[2 + h] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(_mm512_srli_epi16(t[0], 8))),
                                       _mm512_cvtepi16_epi8(_mm512_srli_epi16(t[1], 8)), 1);
      }
    }
    if (PF) prefetch_rows<R>(src.w, i, ahead, in);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512i c = _mm512_permutexvar_epi64(order, _mm512_loadu_si512(src.w + r * in + i));
      const __m512i lo = _mm512_permutex2var_epi8(tb[0], c, tb[1]);
      // high ^ (code & 0x80): a negative code flips the sign of bf16(|code| * s), as in cvt
      const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(tb[2], c, tb[3]), c, sign, 0x78);
      dot(r, __m512bh(_mm512_unpacklo_epi8(lo, hi)), i);
      dot(r, __m512bh(_mm512_unpackhi_epi8(lo, hi)), i + K);
    }
  }
  for (; i + K <= in; i += K) {
    src.block(i);
    if (PF) prefetch_rows<R>(src.w, i, ahead, in);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) dot(r, src.load(r, i), i);
  }
  if (i < in) {
    src.block(i);
    const __mmask32 m = __mmask32((uint64_t(1) << (in - i)) - 1);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) dot(r, src.tail(r, i, m), i);
  }
  store_hsums(a.y + t0 * a.out + r0, a.out, acc);
}

template <int TT, int R, bool PF>
void fp8_tile(const Args& a, int64_t t0, int64_t r0) {
  if (((r0 + R - 1) >> 7) != (r0 >> 7)) dot_rows<TT, R, PF>(a, Fp8Src<R>(a, r0), t0, r0);
  else if (fp8_vbmi_lookup()) fp8_tile_vbmi<TT, R, PF>(a, t0, r0);
  else dot_rows<TT, R, PF>(a, Fp8Src<R, false>(a, r0), t0, r0);
}

struct Bf16Tiles {
  template <int TT, int R>
  static void tile(const Args& a, int64_t t0, int64_t r0) {
    bf16_tile<TT, R, false>(a, t0, r0);
  }
};

template <int TT, int R>
void bf16_chunk(const Args& a, int64_t c0, int64_t c1, int64_t r0) {
  chunk_rows<TT, R>(a, ChunkDot<R, Bf16Src>{{static_cast<const uint16_t*>(a.w) + r0 * a.in, a.in}}, c0, c1, r0);
}

template <int TT, int R>
constexpr Gemm bf16_gemm() {
  Gemm g = gemm_of<Bf16Tiles, TT, R>();
  g.chunk = bf16_chunk<TT, R>;
  return g;
}

// FP8 GEMM: the tile's R rows are dequantized to bf16 once per chunk of tokens
// (prep) into a per-thread buffer, with exactly Fp8Src's operations, then the
// BF16 tiles run on it; rows left over by the tile shape use fp8_tile.
namespace fp8 {

thread_local Buffer t_rows;  // grow-only, R x in bf16

// R rows from r0 as bf16, row r at dst + r * stride (the row's a.in values only).
template <int R>
void to_bf16(const Args& a, int64_t r0, uint16_t* dst, int64_t stride) {
  each_chunk<R>(a, Fp8Src<R>(a, r0), [&](int r, int64_t i, __mmask32 m, __m512bh v) __attribute__((always_inline)) {
    _mm512_mask_storeu_epi16(dst + r * stride + i, m, __m512i(v));
  });
}

template <int R>
void prep(const Args& a, int64_t, int64_t r0) {
  const size_t bytes = size_t(R * a.in) * 2;
  if (t_rows.size() < bytes) t_rows = Buffer(std::max(bytes, t_rows.size() * 3 / 2));
  to_bf16<R>(a, r0, static_cast<uint16_t*>(t_rows.data()), a.in);
}

template <int TT, int R>
void on_rows(const Args& a, int64_t t0, int64_t r0) {
  dot_rows<TT, R, false>(a, Bf16Src{static_cast<const uint16_t*>(t_rows.data()), a.in}, t0, r0);
}

template <int TT, int R>
void chunk(const Args& a, int64_t c0, int64_t c1, int64_t r0) {
  chunk_rows<TT, R>(a, ChunkDot<R, Bf16Src>{{static_cast<const uint16_t*>(t_rows.data()), a.in}}, c0, c1, r0);
}

// full / tok1 / chunk read the rows prep converted on this thread just before
// (drive_rows calls prep, then them, for each block of R rows); row1 / one, for
// rows left over by the tile shape, convert on the fly.
template <int TT, int R>
constexpr Gemm gemm() {
  return {.tokens = TT, .rows = R, .full = on_rows<TT, R>, .tok1 = on_rows<1, R>, .row1 = fp8_tile<TT, 1, false>,
          .one = fp8_tile<1, 1, false>, .prep = prep<R>, .chunk = chunk<TT, R>};
}

}  // namespace fp8

// The same products on f32 FMAs (bf16_fma_avx512.h: the same IEEE operations, checked
// once by fma_exact), for CPUs where vdpbf16ps is the slower: a tile's rows are widened
// once per chunk of tokens (prep, as fp8::prep dequantizes them), split per 32 columns
// into 16 floats of odd elements, then 16 of even ones, the R rows' 32 columns side by
// side (one pointer for all R: with a pointer per row the loop reloaded them from the
// stack; 1-4% measured, BENCHMARKS.md), and the activations are widened once per call
// (widen_row) or, on long rows, in registers. The FMA tiles are offered only where
// fma_exact holds, so a config still never changes a bit.
namespace fma {

// Grow-only: [xb_stride / 32][R][32] f32, the widened, split rows.
thread_local Buffer t_rows;

using bf16fma::DazFtz;
using bf16fma::even_half;
using bf16fma::fma_exact;
using bf16fma::odd_half;

// 32 bf16 (16 pairs) as f32 at d: the 16 odd elements, then the 16 even ones.
MX_INLINE void store_split(float* d, __m512i v) {
  _mm512_storeu_ps(d, odd_half(v));
  _mm512_storeu_ps(d + 16, even_half(v));
}

template <int R, class Src>
void prep_rows(const Args& a, Src src) {
  const int64_t stride = a.xb_stride;
  const size_t bytes = size_t(R * stride) * 4;
  if (t_rows.size() < bytes) t_rows = Buffer(std::max(bytes, t_rows.size() * 3 / 2));
  float* dst = static_cast<float*>(t_rows.data());
  // The last 32 columns whole: zeros past the row, against the activations' zero padding.
  each_chunk<R>(a, src, [&](int r, int64_t i, __mmask32, __m512bh v) __attribute__((always_inline)) {
    store_split(dst + i * R + r * K, __m512i(v));  // the R rows' 32 columns at i side by side
  });
}

template <int R>
void prep_bf16(const Args& a, int64_t, int64_t r0) {
  prep_rows<R>(a, Bf16Src{static_cast<const uint16_t*>(a.w) + r0 * a.in, a.in});
}

template <int R>
void prep_fp8(const Args& a, int64_t, int64_t r0) {
  prep_rows<R>(a, Fp8Src<R>(a, r0));
}

// The activations in the rows' order (Args::xw): per 32 columns the 16 odd elements
// widened, then the 16 even ones, once per call, so the tiles' loops hold only loads
// and FMAs. Widened in the tile instead (an AND or a shift per token and 16 columns,
// on the ports the FMAs use, once per row tile), 4 x 6's inner loop alone ran at 138
// against 163 GFLOP/s (896 columns, 1 thread, Intel Xeon; BENCHMARKS.md). Rows in
// column blocks (chunk_rows) keep that: there the f32 activations, twice the bytes
// from L2 per FMA, measured slower.
constexpr int64_t kWidenMaxIn = 2 * kColBlock;  // the longest rows not column_blocked
static_assert(!column_blocked(kWidenMaxIn) && column_blocked(kWidenMaxIn + 1));

void widen_row(const uint16_t* xb, int64_t stride, float* dst) {
  for (int64_t i = 0; i < stride; i += K) store_split(dst + i, _mm512_loadu_si512(xb + i));
}

// dot_rows' outputs on the rows prep_rows widened, two FMAs per 32 columns: the odd
// elements, then the even ones. PreWidened: the activations from Args::xw, else
// widened from Args::xb in registers. Columns run to the zero padding of the last 32.
template <int TT, int R, bool PreWidened>
MX_INLINE void dot_widened(const Args& a, int64_t t0, int64_t r0, Cols cols) {
  const int64_t stride = a.xb_stride, k_end = cols.keep ? cols.k1 : a.in;
  const float* w = static_cast<const float*>(t_rows.data());
  // Token t's activations at columns [i, i + 32), half h (0: odd, 1: even).
  auto x_half = [&](int t, int64_t i, int h) __attribute__((always_inline)) {
    if constexpr (PreWidened) {
      return _mm512_loadu_ps(a.xw + (t0 + t) * stride + i + 16 * h);
    } else {
      const __m512i v = _mm512_loadu_si512(a.xb + (t0 + t) * stride + i);
      return h ? even_half(v) : odd_half(v);
    }
  };
  __m512 acc[TT][R];
  start(cols, acc);
  // The TT activations in registers, then one weight vector at a time (4 x 6: 24 + 4 + 1
  // vectors); pre-widened with more tokens than rows, the R weights, then one activation
  // at a time (8 x 3: 24 + 3 + 1, where the other order needs 33). Widening in the loop,
  // the 8 x 3 tiles keep the first order, measured faster there (both: BENCHMARKS.md).
  // A vector read by several FMAs stays in its register (avx512::in_register).
  auto half = [&](int64_t i, int h) __attribute__((always_inline)) {
    if constexpr (TT <= R || !PreWidened) {
      __m512 xv[TT];
#pragma GCC unroll 8
      for (int t = 0; t < TT; ++t) xv[t] = x_half(t, i, h);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        __m512 wv = _mm512_loadu_ps(w + i * R + r * K + 16 * h);
        avx512::in_register(wv);
#pragma GCC unroll 8
        for (int t = 0; t < TT; ++t) acc[t][r] = _mm512_fmadd_ps(wv, xv[t], acc[t][r]);
      }
    } else {
      __m512 wv[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        wv[r] = _mm512_loadu_ps(w + i * R + r * K + 16 * h);
        avx512::in_register(wv[r]);
      }
#pragma GCC unroll 8
      for (int t = 0; t < TT; ++t) {
        __m512 xv = x_half(t, i, h);
        avx512::in_register(xv);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[t][r] = _mm512_fmadd_ps(wv[r], xv, acc[t][r]);
      }
    }
  };
  {
    DazFtz g;
    for (int64_t i = cols.k0; i < k_end; i += K) {
      half(i, 0);
      half(i, 1);
    }
  }
  finish(a, cols, k_end, t0, r0, acc);
}

template <int R, bool PreWidened>
struct ChunkFma {
  template <int TT>
  MX_INLINE void run(const Args& a, int64_t t0, int64_t r0, Cols cols) const {
    dot_widened<TT, R, PreWidened>(a, t0, r0, cols);
  }
};

template <int TT, int R>
void chunk(const Args& a, int64_t c0, int64_t c1, int64_t r0) {
  if (a.xw) chunk_rows<TT, R>(a, ChunkFma<R, true>{}, c0, c1, r0);
  else chunk_rows<TT, R>(a, ChunkFma<R, false>{}, c0, c1, r0);
}

// The vdpbf16ps GEMM `g` of the same shape with its rows and tokens on FMAs (chunk);
// rows left over by the tile shape keep g's vdpbf16ps tiles (row1 / one): the same
// bits. full / tok1 stay g's too: drive_rows runs chunk wherever a Gemm has one.
template <int TT, int R>
constexpr Gemm over(Gemm g, TileFn prep) {
  g.prep = prep;
  g.chunk = chunk<TT, R>;
  g.fma = true;
  return g;
}

}  // namespace fma

// The shapes of the f32-activation kernels (so tuned entries keep naming a
// variant): GEMV 8 / 4 rows with 2- and 4-token tiles; GEMM 4 x 6 and 8 x 3
// (TT x R accumulators + R weight vectors + 1 activation vector <= 32 zmm).
constexpr Gemv kBf16Gemv[] = {
    {8, bf16_tile<1, 8, true>, bf16_tile<2, 8, true>, in_subtiles<bf16_tile<4, 4, true>, 4, 8>},
    {4, bf16_tile<1, 4, true>, bf16_tile<2, 4, true>, bf16_tile<4, 4, true>}};
// The vdpbf16ps tiles, then (fma::fma_exact) the same shapes on FMAs.
constexpr Gemm kBf16Gemm[] = {
    bf16_gemm<4, 6>(), bf16_gemm<8, 3>(),
    fma::over<4, 6>(bf16_gemm<4, 6>(), fma::prep_bf16<6>), fma::over<8, 3>(bf16_gemm<8, 3>(), fma::prep_bf16<3>)};

constexpr Gemv kFp8Gemv[] = {
    {8, fp8_tile<1, 8, true>, in_subtiles<fp8_tile<2, 4, true>, 4, 8>, in_subtiles<fp8_tile<4, 4, true>, 4, 8>},
    {4, fp8_tile<1, 4, true>, fp8_tile<2, 4, true>, fp8_tile<4, 4, true>}};
constexpr Gemm kFp8Gemm[] = {
    fp8::gemm<4, 6>(), fp8::gemm<8, 3>(),
    fma::over<4, 6>(fp8::gemm<4, 6>(), fma::prep_fp8<6>), fma::over<8, 3>(fp8::gemm<8, 3>(), fma::prep_fp8<3>)};
constexpr size_t kDotGemms = 2;  // the vdpbf16ps tiles, first in each

// The vdpbf16ps tiles, and the FMA ones with their widened activations where
// fma_exact holds.
template <size_t NV, size_t NM>
DtypeKernels bf16_act_kernels(const Gemv (&gemv)[NV], const Gemm (&gemm)[NM]) {
  DtypeKernels k{nullptr, gemv, std::span(gemm).first(kDotGemms)};
  k.bf16_act = round_row;
  if (fma::fma_exact()) {
    k.gemm = gemm;
    k.bf16_widen = fma::widen_row;
    k.bf16_widen_max_in = fma::kWidenMaxIn;
  }
  return k;
}

}  // namespace

DtypeKernels avx512_bf16dot_kernels() { return bf16_act_kernels(kBf16Gemv, kBf16Gemm); }

DtypeKernels avx512_fp8dot_kernels() { return bf16_act_kernels(kFp8Gemv, kFp8Gemm); }

void fp8_rows_to_bf16(const Args& a, int64_t r0, int64_t rows, uint16_t* dst, int64_t stride) {
  int64_t r = 0;
  for (; r + 16 <= rows; r += 16) fp8::to_bf16<16>(a, r0 + r, dst + r * stride, stride);
  for (; r < rows; ++r) fp8::to_bf16<1>(a, r0 + r, dst + r * stride, stride);
}

}  // namespace mx::matmul_detail
