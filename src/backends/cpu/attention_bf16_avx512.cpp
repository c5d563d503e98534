// The tiled attention kernel (attention_impl.h) on AVX512-BF16: the tile and the
// online softmax of the AVX-512 kernel, with Q.K^T and P.V on vdpbf16ps (two
// multiply-adds per lane and instruction, twice the f32 FMA's), or, where that is
// the slower instruction, prefill's tiles on the same operations as f32 FMAs
// (Bf16Products<true> below). attention.h
// states the contract (AttnProducts::Bf16); in short, per row:
//   q, the keys and the values are rounded to bf16 (to nearest even), and so is
//   each weight P = exp(s - m) where P.V multiplies it; l sums the f32 weights
//   (as FlashAttention-2 sums the fp32 P and multiplies its 16-bit copy: rounding
//   them for l too cost 15% of this kernel's time for no measurable accuracy);
//   s_j   = (vdpbf16ps over the pairs (q[2i], q[2i+1]) . (k_j[2i], k_j[2i+1]) in
//            increasing i, from +0; an odd head_dim's last pair holds a 0) * scale;
//   o[d] += the pairs of keys (2i, 2i+1) of each block in increasing i, one
//            vdpbf16ps each: (P_2i, P_2i+1) . (v_2i[d], v_2i+1[d]).
// The P.V pairs are where a row's own keys meet another row's: a row at position
// p skips every pair past it (a masked vdpbf16ps leaves its lane untouched), and
// when p = 2i is a pair's first key it takes that pair with the second value
// replaced by 0, which is exactly the pair a row alone sees (its key p + 1 is
// the zero row past the block's end, its weight 0). So a row's operations, and
// its bits, do not depend on the batch, and inf or NaN at a later position
// cannot reach it (0 * inf is never formed for it).
//
// Packed layouts (32-bit words, each a bf16 pair, the first in the low half):
//   queries qp[i][RT]: row r's (q[2i], q[2i+1]) in lane r (per tile, per item);
//   keys    kp[j][i]:  (k_j[2i], k_j[2i+1]) (per block, per item; a bf16 cache
//                      row of even head_dim is this row already, read in place);
//   values  vp[i][d]:  (v_2i[d], v_2i+1[d]) (per block, per item);
//   weights pp[i][RT]: row r's (P_2i, P_2i+1) in lane r (per block, per tile).
// Q.K^T broadcasts one key word against a tile's query pairs; P.V one value
// word against the weight pairs, exactly as the f32 kernel broadcasts one float.
// Half tiles (rows in lanes 0..7, below) use lane 2r + e and three more layouts:
//   queries qd[i][16]: row r's qp word in lanes 2r and 2r + 1;
//   keys    k2[jp][i][2]: key 2jp's word i, then key 2jp + 1's (a 64-bit broadcast
//                      gives key 2jp to the even lanes and 2jp + 1 to the odd);
//   weights pd[i][16]: row r's pp word in lanes 2r and 2r + 1; values as vp, two
//                      adjacent words (dims d, d + 1) broadcast as 64 bits.
#include <immintrin.h>

#include "backends/cpu/attention_impl.h"
#include "backends/cpu/bf16_fma_avx512.h"
#include "backends/cpu/fp8_avx512.h"
#include "backends/cpu/simd_avx512.h"

namespace mx::attn_detail {
namespace {

struct Avx512Bf16Attn : simd::Avx512 {
  static constexpr int KS = 8, DS = 8;
};

// Fma: a tile in the wide layout (every tile but a half tile) does each vdpbf16ps
// of its products as two f32 FMAs on the pairs' halves, odd first, under DAZ | FTZ
// (bf16_fma_avx512.h: the same IEEE operations, so the same bits; used only where
// fma_exact holds), for CPUs where vdpbf16ps issues at a quarter of the FMA's rate
// (Intel Xeon: prefill's Q.K^T and P.V at ~0.7x the f32 products' speed). The
// halves come split from the packed words once per tile (queries) and per block
// (keys); the values' are widened from the cache rows once per block (an F32 row's
// rounded to bf16 first), the weights' from their bf16 rounding per block and tile:
// qe / qo, ke / ko, ve / vo, pe / po, each the f32 of the bf16 that vdpbf16ps would
// take. Half tiles (a
// decode token's GQA group) keep vdpbf16ps: a block's split keys and values serve
// one tile of at most 8 rows there, and decode attention on FMAs measured 0.55x
// (Intel Xeon, 1 thread, BF16 cache of 4096 positions: 5.5 -> 3.0 GB/s). In the half
// tiles' own layout (two keys or two value dims side by side, each micro-tile's keys
// and values split into a buffer L1 holds) it measured 1.03-1.07x with the cache in L3
// and 0.97-0.99x from DRAM (ctx 16384, 24 layers): decode then waits on the cache's
// rows, not on the products. Not worth a second set of half tiles.
template <bool Fma>
struct Bf16Products {
  using S = Avx512Bf16Attn;
  using F = __m512;
  using M = __mmask16;
  static constexpr int V = 16, RT = 2 * V, KB = kAttnKeyBlock, KS = S::KS, DS = S::DS;
  static constexpr int NR = V / 2;  // rows of a half tile (below)
  // A half tile's micro-tiles: KH pairs of keys (Q.K^T), ND2 pairs of value dims (P.V). 16 of
  // each (twice the accumulators) measured the same on Zen 5 and waste more of a partial block.
  static constexpr int KH = 8, ND2 = 8;

  static int pairs(int n) { return (n + 1) / 2; }
  static int up16(int n) { return (n + 15) / 16 * 16; }
  // Queries: qp, then the half tiles' layout qd (Fma: then qe, qo). Keys: rows of pairs,
  // values, keys interleaved by pairs (Fma: then ke, ko, rows of up16(pairs); ve, vo,
  // rows of up16(vd)). Weights: pp, then the half tiles' layout pd (Fma: then pe, po).
  static int64_t q_floats(const AttnArgs& a) { return int64_t(pairs(a.head_dim)) * (RT + V + (Fma ? 2 * RT : 0)); }
  static int64_t kv_floats(const AttnArgs& a) {
    const int64_t split = Fma ? 2 * int64_t(KB) * up16(pairs(a.head_dim)) + int64_t(KB) * up16(a.vd()) : 0;
    return 2 * int64_t(KB) * pairs(a.head_dim) + int64_t(KB / 2) * a.vd() + split;
  }
  static int64_t p_floats(const AttnArgs&) { return int64_t(KB / 2) * (RT + V + (Fma ? 2 * RT : 0)); }

  // A half tile (half_tile<V>, attention_impl.h) has its rows in lanes 0..7 (a
  // decode token's GQA group of up to 8 heads: 7 for Qwen3's 14 over 2). Its
  // products put two keys (Q.K^T) or two value dims (P.V) side by side in the
  // lanes, 2r + e for row r, so each vdpbf16ps does 16 products a row needs where
  // the tile layout does 8 and pads the rest. Every lane still performs its row's
  // sequence above, operand for operand, so a row's bits are those of the wide
  // layout.
  static __m512i dup_idx() { return _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0); }
  // Lanes 2r + e to e * 8 + r: the even lanes in the low half, the odd ones in the high.
  static __m512i split_idx() { return _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0); }

  // The 16 pairs (x[l], y[l]) in the 32-bit lanes l, rounded to bf16 to nearest even.
  static __m512i interleave(F x, F y) {
    alignas(64) static constexpr uint16_t kIdx[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i halves = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(y, x));  // x in words 0-15, y in 16-31
    return _mm512_permutexvar_epi16(_mm512_load_si512(kIdx), halves);
  }
  static __m512bh bh(__m512i v) { return reinterpret_cast<__m512bh>(v); }
  // acc + a . b in the lanes of m, acc elsewhere. Written out because GCC 12 can
  // emit _mm512_mask_dpbf16_ps without its mask: a constant 0x00FF mask gives all
  // 16 lanes the product, and in this kernel other rows' pairs reached lanes
  // whose mask was clear (the batch-invariance test caught it).
  static F mask_dot(F acc, M m, __m512bh a, __m512bh b) {
    asm("vdpbf16ps %2, %1, %0%{%3%}" : "+v"(acc) : "v"(a), "v"(b), "Yk"(m));
    return acc;
  }
  // One 32-bit word (a pair) to every lane; two words to the even and odd lanes.
  // memcpy: a bf16 cache row read in place need only be 2-byte aligned.
  static __m512i bcast_word(const float* p) {
    int32_t w;
    std::memcpy(&w, p, sizeof w);
    return _mm512_set1_epi32(w);
  }
  static __m512i bcast_words2(const float* p) {
    int64_t w;
    std::memcpy(&w, p, sizeof w);
    return _mm512_set1_epi64(w);
  }

  static void pack_queries(const float* qt, int hd, const int32_t* pos, float* qp) {
    const bool half = half_tile<V>(pos);
    float* qd = qp + int64_t(pairs(hd)) * RT;
    for (int i = 0; i < pairs(hd); ++i) {
      for (int n = 0; n < 2; ++n) {
        const F x = _mm512_loadu_ps(qt + 2 * i * RT + n * V);
        const F y = 2 * i + 1 < hd ? _mm512_loadu_ps(qt + (2 * i + 1) * RT + n * V) : _mm512_setzero_ps();
        _mm512_storeu_si512(qp + i * RT + n * V, interleave(x, y));
      }
      if (half) _mm512_storeu_si512(qd + i * V, _mm512_permutexvar_epi32(dup_idx(), _mm512_loadu_si512(qp + i * RT)));
    }
    if (Fma && !half) {
      float* qe = qd + int64_t(pairs(hd)) * V;
      float* qo = qe + int64_t(pairs(hd)) * RT;
      for (int i = 0; i < pairs(hd) * RT; i += V) {
        const __m512i w = _mm512_loadu_si512(qp + i);
        _mm512_storeu_ps(qe + i, bf16fma::even_half(w));
        _mm512_storeu_ps(qo + i, bf16fma::odd_half(w));
      }
    }
  }

  static constexpr bool kReadsNarrow = true;

  // Elements [d, d + 16) of a row (the lanes of m; 0 elsewhere) as f32, exactly:
  // bf16 shifted into place, E4M3 through f16 (fp8_avx512.h; the 2^-8 it leaves
  // is undone by the scale).
  static F row_f32(const void* row, DType dt, int d, __mmask16 m) {
    if (dt == DType::BF16)
      return _mm512_castsi512_ps(_mm512_slli_epi32(
          _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(row) + d)), 16));
    if (dt == DType::F8_E4M3)
      return matmul_detail::avx512::fp8_cvt16(_mm_maskz_loadu_epi8(m, static_cast<const uint8_t*>(row) + d),
                                              _mm512_set1_ps(256.0f));
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(row) + d);
  }
  static __mmask16 first_n(int n) { return matmul_detail::avx512::first_n(n); }
  static __mmask32 first_n32(int n) { return matmul_detail::avx512::first_n32(n); }

  // A bf16 cache row of an even head_dim is already a row of pairs: read in place.
  static bool raw_keys(const KeyBlock& b, const AttnArgs& a) { return b.dt == DType::BF16 && a.head_dim % 2 == 0; }
  // Key j's row of pairs: the cache row where read in place (raw), else its packed copy
  // in kvp (past the block's end, the zero row's).
  static const float* key_row(bool raw, const void* const* kp, const float* kvp, int hp, int j) {
    return raw ? static_cast<const float*>(kp[j]) : kvp + int64_t(j) * hp;
  }
  static const float* key_row(const KeyBlock& b, const AttnArgs& a, int j) {
    return key_row(raw_keys(b, a), b.kp, b.kvp, pairs(a.head_dim), j);
  }
  static float* values_packed(const KeyBlock& b, const AttnArgs& a) {
    return b.kvp + int64_t(KB) * pairs(a.head_dim);
  }
  static float* keys_by_pairs(const KeyBlock& b, const AttnArgs& a) {
    return b.kvp + int64_t(KB) * pairs(a.head_dim) + int64_t(KB / 2) * a.vd();
  }
  // Fma: the keys' even elements ke[j][up16(hp)], then their odd ones ko; the values of
  // each pair's first key ve[i][up16(vd)], then of its second vo.
  static float* keys_even(const KeyBlock& b, const AttnArgs& a) {
    return keys_by_pairs(b, a) + int64_t(KB) * pairs(a.head_dim);
  }
  static float* values_even(const KeyBlock& b, const AttnArgs& a) {
    return keys_even(b, a) + 2 * int64_t(KB) * up16(pairs(a.head_dim));
  }

  // Keys as rows of pairs (32 elements rounded by vcvtne2ps2bf16 are 16 pairs in
  // order; an odd head_dim's last pair gets a 0), unless read in place; for
  // half tiles, also keys 2jp and 2jp + 1 interleaved word by word; values as
  // pairs of keys, per dim (past the block's end: 0; Fma: only for half tiles, the
  // wide tiles' halves come from split_block). Every key a micro-tile of scores
  // reads is there (the rows past n are the zero row).
  static void pack_block(const KeyBlock& b, int n, const AttnArgs& a) {
    const int hd = a.head_dim, vd = a.vd(), hp = pairs(hd);
    bool any_half = false, any_wide = false;
    for (int tile = 0; tile < b.n_tiles; ++tile) (half_tile<V>(b.tile_pos + tile * RT) ? any_half : any_wide) = true;
    const int wide_keys = any_wide ? std::min(KB, (n + KS - 1) / KS * KS) : 0;
    const int half_keys = any_half ? std::min(KB, (n + 2 * KH - 1) / (2 * KH) * (2 * KH)) : 0;
    // What the loops read, in locals: the intrinsics' stores may alias anything, and through
    // b every row pointer and width would be reloaded after each of them. Masks are per chunk
    // of a row, so the chunks are the outer loops.
    const void* const* const kp = b.kp;
    const void* const* const vp = b.vp;
    const DType dt = b.dt;
    float* const kvp = b.kvp;
    if (!raw_keys(b, a))
      for (int d = 0; d < hd; d += 32) {
        const __mmask16 lo = first_n(hd - d), hi = first_n(hd - d - 16), out = first_n(pairs(hd - d));
        for (int j = 0; j < std::max(wide_keys, half_keys); ++j) {
          const DType rt = j < n ? dt : DType::F32;  // the zero row is f32
          _mm512_mask_storeu_epi32(kvp + int64_t(j) * hp + d / 2, out,
                                   reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(row_f32(kp[j], rt, d + 16, hi),
                                                                                 row_f32(kp[j], rt, d, lo))));
        }
      }
    if (half_keys) {
      const __m512i lo_idx = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
      const __m512i hi_idx = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
      float* const k2 = keys_by_pairs(b, a);
      const bool raw = raw_keys(b, a);
      for (int c = 0; c < hp; c += 16) {
        const __mmask16 m = first_n(hp - c), lo = first_n(2 * (hp - c)), hi = first_n(2 * (hp - c) - 16);
        for (int jp = 0; jp < half_keys / 2; ++jp) {
          const float *ra = key_row(raw, kp, kvp, hp, 2 * jp) + c, *rb = key_row(raw, kp, kvp, hp, 2 * jp + 1) + c;
          const __m512i x = _mm512_maskz_loadu_epi32(m, ra), y = _mm512_maskz_loadu_epi32(m, rb);
          float* out = k2 + int64_t(jp) * 2 * hp + 2 * c;
          _mm512_mask_storeu_epi32(out, lo, _mm512_permutex2var_epi32(x, lo_idx, y));
          _mm512_mask_storeu_epi32(out + 16, hi, _mm512_permutex2var_epi32(x, hi_idx, y));
        }
      }
    }
    // Values as pairs of keys, per dim, where vdpbf16ps reads them (Fma: only for half tiles): a
    // bf16 row's words paired straight from the rows (bf16 is exact), other rows through f32.
    if (Fma && wide_keys) split_block(b, n, wide_keys, a);
    if (Fma && !half_keys) return;
    float* const vpk = values_packed(b, a);
    alignas(64) static constexpr uint16_t kLo[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                     8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    const __m512i lo_idx = _mm512_load_si512(kLo), hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
    for (int d = 0; d < vd; d += 32) {
      const __mmask32 m = first_n32(vd - d);
      const __mmask16 lo = first_n(vd - d), hi = first_n(vd - d - 16);
      for (int i = 0; i < pairs(n); ++i) {
        const bool second = 2 * i + 1 < n;
        float* out = vpk + int64_t(i) * vd + d;
        if (dt == DType::BF16) {
          const uint16_t* r0 = static_cast<const uint16_t*>(vp[2 * i]) + d;
          const __m512i x = _mm512_maskz_loadu_epi16(m, r0);
          const __m512i y = second ? _mm512_maskz_loadu_epi16(m, static_cast<const uint16_t*>(vp[2 * i + 1]) + d)
                                   : _mm512_setzero_si512();
          _mm512_mask_storeu_epi32(out, lo, _mm512_permutex2var_epi16(x, lo_idx, y));
          _mm512_mask_storeu_epi32(out + 16, hi, _mm512_permutex2var_epi16(x, hi_idx, y));
        } else {
          for (int h = 0; h < 2; ++h) {
            const __mmask16 mh = h ? hi : lo;
            const F x = row_f32(vp[2 * i], dt, d + 16 * h, mh);
            const F y = second ? row_f32(vp[2 * i + 1], dt, d + 16 * h, mh) : _mm512_setzero_ps();
            _mm512_mask_storeu_epi32(out + 16 * h, mh, interleave(x, y));
          }
        }
      }
    }
  }

  // Fma: the halves of every key word a wide tile's scores read (keys [0, wide_keys), the
  // zero row's past n) and of every value its P.V reads (pairs [0, pairs(n))), the values
  // straight from the rows (an f32 of a bf16 or E4M3 element is the element; widened from the
  // packed words, they cost a second pass: 3-4% of prefill attention on an Intel Xeon).
  static void split_block(const KeyBlock& b, int n, int wide_keys, const AttnArgs& a) {
    const int hp = pairs(a.head_dim), hs = up16(hp), vd = a.vd(), vs = up16(vd);
    float* const ke = keys_even(b, a);
    float* const ko = ke + int64_t(KB) * hs;
    const bool raw = raw_keys(b, a);
    for (int j = 0; j < wide_keys; ++j) {
      const float* row = key_row(raw, b.kp, b.kvp, hp, j);
      for (int c = 0; c < hp; c += 16) {
        const __m512i w = _mm512_maskz_loadu_epi32(first_n(hp - c), row + c);  // zeros past the row
        _mm512_storeu_ps(ke + int64_t(j) * hs + c, bf16fma::even_half(w));
        _mm512_storeu_ps(ko + int64_t(j) * hs + c, bf16fma::odd_half(w));
      }
    }
    float* const ve = values_even(b, a);
    float* const vo = ve + int64_t(KB / 2) * vs;
    const void* const* const vp = b.vp;
    const DType dt = b.dt;
    for (int i = 0; i < pairs(n); ++i)
      for (int d = 0; d < vd; d += 16) {
        const __mmask16 m = first_n(vd - d);  // zeros past the dims
        _mm512_storeu_ps(ve + int64_t(i) * vs + d, value_f32(vp[2 * i], dt, d, m));
        _mm512_storeu_ps(vo + int64_t(i) * vs + d,
                         2 * i + 1 < n ? value_f32(vp[2 * i + 1], dt, d, m) : _mm512_setzero_ps());
      }
  }
  // Elements [d, d + 16) of a value row (the lanes of m; 0 elsewhere) as the f32 of the bf16
  // that P.V multiplies: exact for BF16 and E4M3 rows; an f32 row's rounded to nearest even, as
  // interleave rounds it.
  static F value_f32(const void* row, DType dt, int d, __mmask16 m) {
    const F x = row_f32(row, dt, d, m);
    return dt == DType::F32 ? widen(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x))) : x;
  }
  // 16 bf16 as f32.
  static F widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

  template <int NV>
  static void score_tile(const TileRows& t, int hp, const KeyBlock& b, const AttnArgs& a, int j0, F scale, float* s) {
    F acc[KS][NV];
    const float* keys[KS];
    for (int k = 0; k < KS; ++k) {
      keys[k] = key_row(b, a, j0 + k);
      for (int n = 0; n < NV; ++n) acc[k][n] = _mm512_setzero_ps();
    }
    for (int i = 0; i < hp; ++i) {
      prefetch_step(b);
      __m512bh q[NV];
      for (int n = 0; n < NV; ++n) q[n] = bh(_mm512_loadu_si512(t.qp + i * RT + n * V));
      for (int k = 0; k < KS; ++k) {
        const __m512bh kw = bh(bcast_word(keys[k] + i));
        for (int n = 0; n < NV; ++n) acc[k][n] = _mm512_dpbf16_ps(acc[k][n], q[n], kw);
      }
    }
    store_scores<NV>(t, b, j0, scale, acc, s);
  }
  // The same sums on FMAs (Fma): per pair, the odd halves' products, then the even ones'.
  template <int NV>
  static void score_tile_fma(const TileRows& t, int hp, const KeyBlock& b, const AttnArgs& a, int j0, F scale,
                             float* s) {
    F acc[KS][NV];
    for (int k = 0; k < KS; ++k)
      for (int n = 0; n < NV; ++n) acc[k][n] = _mm512_setzero_ps();
    const float* qe = t.qp + int64_t(hp) * (RT + V);
    const float* qo = qe + int64_t(hp) * RT;
    const int hs = up16(hp);
    const float* ke = keys_even(b, a) + int64_t(j0) * hs;
    const float* ko = ke + int64_t(KB) * hs;
    {
      bf16fma::DazFtz g;
      for (int i = 0; i < hp; ++i) {
        prefetch_step(b);
        F e[NV], o[NV];
        for (int n = 0; n < NV; ++n)
          e[n] = _mm512_loadu_ps(qe + i * RT + n * V), o[n] = _mm512_loadu_ps(qo + i * RT + n * V);
        for (int k = 0; k < KS; ++k) {
          const F x = _mm512_set1_ps(ko[k * hs + i]);
          for (int n = 0; n < NV; ++n) acc[k][n] = _mm512_fmadd_ps(o[n], x, acc[k][n]);
        }
        for (int k = 0; k < KS; ++k) {
          const F x = _mm512_set1_ps(ke[k * hs + i]);
          for (int n = 0; n < NV; ++n) acc[k][n] = _mm512_fmadd_ps(e[n], x, acc[k][n]);
        }
      }
    }
    store_scores<NV>(t, b, j0, scale, acc, s);
  }
  // s[j] = acc * scale for keys [j0, j0 + KS), -inf where a row's position is below the key's
  // (under the caller's MXCSR, as after vdpbf16ps).
  template <int NV>
  static void store_scores(const TileRows& t, const KeyBlock& b, int j0, F scale, const F (&acc)[KS][NV], float* s) {
    const F ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int n = 0; n < NV; ++n) {
      const __m512i pv = _mm512_loadu_si512(t.pos + n * V);
      for (int k = 0; k < KS; ++k)
        _mm512_storeu_ps(s + (j0 + k) * RT + n * V,
                         S::select(S::ge(pv, b.kpos0 + j0 + k), _mm512_mul_ps(acc[k][n], scale), ninf));
    }
  }
  // A half tile's keys [j0, j0 + 2 KH): KH pairs of keys, key j0 + 2k + e in lanes 2r + e.
  static void score_tile_half(const TileRows& t, int hp, const KeyBlock& b, const float* k2, int kpos0, int j0, F scale,
                              float* s) {
    F acc[KH];
    for (int k = 0; k < KH; ++k) acc[k] = _mm512_setzero_ps();
    const float* qd = t.qp + int64_t(hp) * RT;
    const float* keys = k2 + int64_t(j0) * hp;  // pair j0 / 2 + k at keys + 2k hp
    for (int i = 0; i < hp; ++i) {
      prefetch_step(b);
      const __m512bh q = bh(_mm512_loadu_si512(qd + i * V));
      for (int k = 0; k < KH; ++k) acc[k] = _mm512_dpbf16_ps(acc[k], q, bh(bcast_words2(keys + 2 * k * hp + 2 * i)));
    }
    const F ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    const __m512i pv = _mm512_loadu_si512(t.pos);  // lanes 8.. are padding (-1): -inf there
    for (int k = 0; k < KH; ++k) {
      const F x = _mm512_permutexvar_ps(split_idx(), _mm512_mul_ps(acc[k], scale));
      const int j = j0 + 2 * k;
      _mm512_storeu_ps(s + j * RT, S::select(S::ge(pv, kpos0 + j), x, ninf));
      _mm512_storeu_ps(s + (j + 1) * RT, S::select(S::ge(pv, kpos0 + j + 1), S::high_half(x), ninf));
    }
  }
  template <int NV>
  static void scores(const TileRows& t, const KeyBlock& b, int nk, const AttnArgs& a, float* s) {
    const F scale = _mm512_set1_ps(a.scale);
    const int hp = pairs(a.head_dim);
    if (NV == 1 && half_tile<V>(t.pos)) {
      for (int j0 = 0; j0 < nk; j0 += 2 * KH) score_tile_half(t, hp, b, keys_by_pairs(b, a), b.kpos0, j0, scale, s);
      return;
    }
    for (int j0 = 0; j0 < nk; j0 += KS)
      if constexpr (Fma) score_tile_fma<NV>(t, hp, b, a, j0, scale, s);
      else score_tile<NV>(t, hp, b, a, j0, scale, s);
  }

  // Lanes that take pair i whole (position >= its second key), per vector of the
  // tile; and the pairs some lane takes only the first key of (position == the
  // pair's first key), with those lanes. Such a pair is the last a lane takes in
  // the block (every later pair starts past its position), so it can go after
  // the loop over the whole pairs without changing any lane's order.
  struct Masks {
    M whole[KB / 2][2];
    int n_first = 0;
    int first_pair[KB / 2];
    M first[KB / 2][2];
  };

  template <int NV, int ND>
  static void value_tile(const KeyBlock& b, float* ot, int d0, const float* vpk, int vd, int np, const Masks& m,
                         const float* pp, const F* alpha) {
    F acc[ND][NV];
    for (int dd = 0; dd < ND; ++dd)
      for (int n = 0; n < NV; ++n)
        acc[dd][n] = _mm512_mul_ps(_mm512_loadu_ps(ot + (d0 + dd) * RT + n * V), alpha[n]);
    for (int i = 0; i < np; ++i) {
      prefetch_step(b);
      __m512bh w[NV];
      for (int n = 0; n < NV; ++n) w[n] = bh(_mm512_loadu_si512(pp + i * RT + n * V));
      const float* v = vpk + int64_t(i) * vd + d0;
      for (int dd = 0; dd < ND; ++dd) {
        const __m512bh x = bh(bcast_word(v + dd));
        for (int n = 0; n < NV; ++n) acc[dd][n] = mask_dot(acc[dd][n], m.whole[i][n], w[n], x);
      }
    }
    const __m512i low = _mm512_set1_epi32(0xFFFF);
    for (int f = 0; f < m.n_first; ++f) {
      const int i = m.first_pair[f];
      __m512bh w[NV];
      for (int n = 0; n < NV; ++n) w[n] = bh(_mm512_loadu_si512(pp + i * RT + n * V));
      const float* v = vpk + int64_t(i) * vd + d0;
      for (int dd = 0; dd < ND; ++dd) {
        const __m512bh x = bh(_mm512_and_si512(bcast_word(v + dd), low));  // (v_2i[d], 0)
        for (int n = 0; n < NV; ++n) acc[dd][n] = mask_dot(acc[dd][n], m.first[f][n], w[n], x);
      }
    }
    for (int dd = 0; dd < ND; ++dd)
      for (int n = 0; n < NV; ++n) _mm512_storeu_ps(ot + (d0 + dd) * RT + n * V, acc[dd][n]);
  }
  // The same sums on FMAs (Fma): per pair, the odd halves' products, then the even ones',
  // each masked as its vdpbf16ps; a first-key-only pair's odd value is +0, as there.
  template <int NV, int ND>
  static void value_tile_fma(const KeyBlock& b, float* ot, int d0, const float* ve, const float* vo, int vs, int np,
                             const Masks& m, const float* pe, const float* po, const F* alpha) {
    F acc[ND][NV];
    for (int dd = 0; dd < ND; ++dd)
      for (int n = 0; n < NV; ++n)
        acc[dd][n] = _mm512_mul_ps(_mm512_loadu_ps(ot + (d0 + dd) * RT + n * V), alpha[n]);
    auto pair = [&](int i, const M (&mask)[2], bool whole) __attribute__((always_inline)) {
      F we[NV], wo[NV];
      for (int n = 0; n < NV; ++n)
        we[n] = _mm512_loadu_ps(pe + i * RT + n * V), wo[n] = _mm512_loadu_ps(po + i * RT + n * V);
      const float* e = ve + int64_t(i) * vs + d0;
      const float* o = vo + int64_t(i) * vs + d0;
      for (int dd = 0; dd < ND; ++dd) {
        const F x = whole ? _mm512_set1_ps(o[dd]) : _mm512_setzero_ps();
        for (int n = 0; n < NV; ++n) acc[dd][n] = _mm512_mask3_fmadd_ps(wo[n], x, acc[dd][n], mask[n]);
      }
      for (int dd = 0; dd < ND; ++dd) {
        const F x = _mm512_set1_ps(e[dd]);
        for (int n = 0; n < NV; ++n) acc[dd][n] = _mm512_mask3_fmadd_ps(we[n], x, acc[dd][n], mask[n]);
      }
    };
    {
      bf16fma::DazFtz g;
      for (int i = 0; i < np; ++i) {
        prefetch_step(b);
        pair(i, m.whole[i], true);
      }
      for (int f = 0; f < m.n_first; ++f) pair(m.first_pair[f], m.first[f], false);
    }
    for (int dd = 0; dd < ND; ++dd)
      for (int n = 0; n < NV; ++n) _mm512_storeu_ps(ot + (d0 + dd) * RT + n * V, acc[dd][n]);
  }
  // A half tile's dims [d0, d0 + 2 ND2): dim d0 + 2dd + e of row r in lane 2r + e, the
  // weights pd and the masks duplicated to both lanes of a row.
  static void value_tile_half(const KeyBlock& b, float* ot, int d0, const float* vpk, int vd, int np, const M* whole,
                              int n_first, const int* first_pair, const M* first, const float* pd, F alpha) {
    const __m512i lo_idx = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    F acc[ND2];
    for (int dd = 0; dd < ND2; ++dd)
      acc[dd] = _mm512_mul_ps(_mm512_permutex2var_ps(_mm512_loadu_ps(ot + (d0 + 2 * dd) * RT), lo_idx,
                                                     _mm512_loadu_ps(ot + (d0 + 2 * dd + 1) * RT)),
                              alpha);
    for (int i = 0; i < np; ++i) {
      prefetch_step(b);
      const __m512bh w = bh(_mm512_loadu_si512(pd + i * V));
      const float* v = vpk + int64_t(i) * vd + d0;
      for (int dd = 0; dd < ND2; ++dd) acc[dd] = mask_dot(acc[dd], whole[i], w, bh(bcast_words2(v + 2 * dd)));
    }
    const __m512i low = _mm512_set1_epi32(0xFFFF);
    for (int f = 0; f < n_first; ++f) {
      const int i = first_pair[f];
      const __m512bh w = bh(_mm512_loadu_si512(pd + i * V));
      const float* v = vpk + int64_t(i) * vd + d0;
      for (int dd = 0; dd < ND2; ++dd)
        acc[dd] = mask_dot(acc[dd], first[f], w, bh(_mm512_and_si512(bcast_words2(v + 2 * dd), low)));
    }
    for (int dd = 0; dd < ND2; ++dd) {
      const F x = _mm512_permutexvar_ps(split_idx(), acc[dd]);
      _mm512_mask_storeu_ps(ot + (d0 + 2 * dd) * RT, 0x00FF, x);
      _mm512_mask_storeu_ps(ot + (d0 + 2 * dd + 1) * RT, 0x00FF, S::high_half(x));
    }
  }

  // A half tile's P.V over its first dims, a multiple of 2 ND2 (returned; the rest, an odd
  // tail, goes through the tile layout): the weights pd, made straight from the scores (one
  // rounding to bf16 and one permute, the words pp would hold), and the masks from the rows'
  // positions duplicated to both lanes of a row.
  static int values_half(float* ot, const TileRows& t, const KeyBlock& b, int nk, F alpha, const float* s,
                         const AttnArgs& a, float* pd) {
    const int np = pairs(nk), vd = a.vd(), done = vd / (2 * ND2) * (2 * ND2);
    if (!done) return 0;
    // Word 4r + 2e + f of pd's row: f ? P_2i+1 : P_2i of row r (words 16 + r and r of the rounded pair).
    alignas(64) static constexpr uint16_t kDup[32] = {0, 16, 0, 16, 1, 17, 1, 17, 2, 18, 2, 18, 3, 19, 3, 19,
                                                      4, 20, 4, 20, 5, 21, 5, 21, 6, 22, 6, 22, 7, 23, 7, 23};
    const __m512i dup = _mm512_load_si512(kDup);
    const __m512i posd = _mm512_permutexvar_epi32(dup_idx(), _mm512_loadu_si512(t.pos));
    M whole[KB / 2], first[KB / 2];
    int first_pair[KB / 2], n_first = 0;
    for (int i = 0; i < np; ++i) {
      const int k0 = b.kpos0 + 2 * i;
      whole[i] = S::ge(posd, k0 + 1);
      const M f = _mm512_cmpeq_epi32_mask(posd, _mm512_set1_epi32(k0));
      if (f) first_pair[n_first] = i, first[n_first++] = f;  // see Masks
      const F x = _mm512_loadu_ps(s + 2 * i * RT);
      const F y = 2 * i + 1 < nk ? _mm512_loadu_ps(s + (2 * i + 1) * RT) : _mm512_setzero_ps();
      _mm512_storeu_si512(pd + i * V,
                          _mm512_permutexvar_epi16(dup, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(y, x))));
    }
    const F alpha2 = _mm512_permutexvar_ps(dup_idx(), alpha);
    const float* vals = values_packed(b, a);
    for (int d = 0; d < done; d += 2 * ND2)
      value_tile_half(b, ot, d, vals, vd, np, whole, n_first, first_pair, first, pd, alpha2);
    return done;
  }

  template <int NV>
  static void values(float* ot, const TileRows& t, const KeyBlock& b, int nk, const F* alpha, const float* s,
                     const AttnArgs& a, float* pp) {
    const int np = pairs(nk), vd = a.vd();
    int d = 0;
    const bool half = NV == 1 && half_tile<V>(t.pos);
    if (half && (d = values_half(ot, t, b, nk, alpha[0], s, a, pp + (KB / 2) * RT)) == vd) return;
    const bool fma = Fma && !half;  // a half tile's odd tail keeps vdpbf16ps, as its other dims
    float* pe = pp + (KB / 2) * (RT + V);
    float* po = pe + (KB / 2) * RT;
    Masks m;
    __m512i pos[NV];
    for (int n = 0; n < NV; ++n) pos[n] = _mm512_loadu_si512(t.pos + n * V);
    for (int i = 0; i < np; ++i) {
      const int first = b.kpos0 + 2 * i;
      M f[NV], any = 0;
      for (int n = 0; n < NV; ++n) {
        m.whole[i][n] = S::ge(pos[n], first + 1);
        any |= f[n] = _mm512_cmpeq_epi32_mask(pos[n], _mm512_set1_epi32(first));
        // weights past the tile's keys (an odd nk's last pair) are 0
        const F x = _mm512_loadu_ps(s + 2 * i * RT + n * V);
        const F y = 2 * i + 1 < nk ? _mm512_loadu_ps(s + (2 * i + 1) * RT + n * V) : _mm512_setzero_ps();
        if (fma) {  // the words interleave() would pair: x's bf16 the even half, y's the odd
          const __m512i w = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(y, x));
          _mm512_storeu_ps(pe + i * RT + n * V, widen(_mm512_castsi512_si256(w)));
          _mm512_storeu_ps(po + i * RT + n * V, widen(_mm512_extracti64x4_epi64(w, 1)));
        } else {
          _mm512_storeu_si512(pp + i * RT + n * V, interleave(x, y));
        }
      }
      if (any) {
        m.first_pair[m.n_first] = i;
        for (int n = 0; n < NV; ++n) m.first[m.n_first][n] = f[n];
        ++m.n_first;
      }
    }
    if (fma) {
      const float* ve = values_even(b, a);
      const int vs = up16(vd);
      const float* vo = ve + int64_t(KB / 2) * vs;
      for (; d + DS <= vd; d += DS) value_tile_fma<NV, DS>(b, ot, d, ve, vo, vs, np, m, pe, po, alpha);
      for (; d < vd; ++d) value_tile_fma<NV, 1>(b, ot, d, ve, vo, vs, np, m, pe, po, alpha);
      return;
    }
    const float* vals = values_packed(b, a);
    for (; d + DS <= vd; d += DS) value_tile<NV, DS>(b, ot, d, vals, vd, np, m, pp, alpha);
    for (; d < vd; ++d) value_tile<NV, 1>(b, ot, d, vals, vd, np, m, pp, alpha);
  }
};

}  // namespace

Kernel avx512_bf16_attention_kernel() { return Tiled<Avx512Bf16Attn, Bf16Products<false>>::kernel(); }

Kernel avx512_bf16fma_attention_kernel() { return Tiled<Avx512Bf16Attn, Bf16Products<true>>::kernel(); }

bool bf16_attention_fma_exact() { return bf16fma::fma_exact(); }

}  // namespace mx::attn_detail
