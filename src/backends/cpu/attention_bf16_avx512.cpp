// The tiled attention kernel (attention_impl.h) on AVX512-BF16: the tile and the
// online softmax of the AVX-512 kernel, with Q.K^T and P.V on vdpbf16ps (two
// multiply-adds per lane and instruction, twice the f32 FMA's). attention.h
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
//   keys    kp[j][i]:  (k_j[2i], k_j[2i+1]) (per block, per item);
//   values  vp[i][d]:  (v_2i[d], v_2i+1[d]) (per block, per item);
//   weights pp[i][RT]: row r's (P_2i, P_2i+1) in lane r (per block, per tile).
// Q.K^T broadcasts one key word against a tile's query pairs; P.V one value
// word against the weight pairs, exactly as the f32 kernel broadcasts one float.
#include <immintrin.h>

#include "backends/cpu/attention_impl.h"
#include "backends/cpu/fp8_avx512.h"
#include "backends/cpu/simd_avx512.h"

namespace mx::attn_detail {
namespace {

struct Avx512Bf16Attn : simd::Avx512 {
  static constexpr int KS = 8, DS = 8;
};

struct Bf16Products {
  using S = Avx512Bf16Attn;
  using F = __m512;
  using M = __mmask16;
  static constexpr int V = 16, RT = 2 * V, KB = kAttnKeyBlock, KS = S::KS, DS = S::DS;

  static int pairs(int n) { return (n + 1) / 2; }
  static int64_t q_floats(const AttnArgs& a) { return int64_t(pairs(a.head_dim)) * RT; }
  static int64_t kv_floats(const AttnArgs& a) { return int64_t(KB) * pairs(a.head_dim) + int64_t(KB / 2) * a.vd(); }
  static int64_t p_floats(const AttnArgs&) { return int64_t(KB / 2) * RT; }

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
  static __m512i bcast_word(const float* p) { return _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(p)); }

  static void pack_queries(const float* qt, int hd, float* qp) {
    for (int i = 0; i < pairs(hd); ++i)
      for (int n = 0; n < 2; ++n) {
        const F x = _mm512_loadu_ps(qt + 2 * i * RT + n * V);
        const F y = 2 * i + 1 < hd ? _mm512_loadu_ps(qt + (2 * i + 1) * RT + n * V) : _mm512_setzero_ps();
        _mm512_storeu_si512(qp + i * RT + n * V, interleave(x, y));
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
  static __mmask16 first_n(int n) { return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? 0 : __mmask16((1u << n) - 1); }

  // Keys as rows of pairs (32 elements rounded by vcvtne2ps2bf16 are 16 pairs in
  // order; an odd head_dim's last pair gets a 0), for every key a micro-tile of
  // scores reads (the rows past n are the zero row); values as pairs of keys, per
  // dim (past the block's end: 0).
  static void pack_block(const KeyBlock& b, int n, const AttnArgs& a) {
    const int hd = a.head_dim, vd = a.vd(), hp = pairs(hd);
    const int nkeys = std::min(KB, (n + KS - 1) / KS * KS);
    for (int j = 0; j < nkeys; ++j) {
      const DType dt = j < n ? b.dt : DType::F32;  // the zero row is f32
      float* out = b.kvp + int64_t(j) * hp;
      for (int d = 0; d < hd; d += 32) {
        const F lo = row_f32(b.kp[j], dt, d, first_n(hd - d)), hi = row_f32(b.kp[j], dt, d + 16, first_n(hd - d - 16));
        _mm512_mask_storeu_epi32(out + d / 2, first_n(pairs(hd - d)),
                                 reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
      }
    }
    float* vpk = b.kvp + int64_t(KB) * hp;
    for (int i = 0; i < pairs(n); ++i) {
      const bool second = 2 * i + 1 < n;
      for (int d = 0; d < vd; d += 16) {
        const __mmask16 m = first_n(vd - d);
        const F x = row_f32(b.vp[2 * i], b.dt, d, m);
        const F y = second ? row_f32(b.vp[2 * i + 1], b.dt, d, m) : _mm512_setzero_ps();
        _mm512_mask_storeu_epi32(vpk + int64_t(i) * vd + d, m, interleave(x, y));
      }
    }
  }

  template <int NV>
  static void score_tile(const TileRows& t, int hp, const float* kpk, int kpos0, int j0, F scale, float* s) {
    F acc[KS][NV];
    for (int k = 0; k < KS; ++k)
      for (int n = 0; n < NV; ++n) acc[k][n] = _mm512_setzero_ps();
    const float* keys = kpk + int64_t(j0) * hp;
    for (int i = 0; i < hp; ++i) {
      __m512bh q[NV];
      for (int n = 0; n < NV; ++n) q[n] = bh(_mm512_loadu_si512(t.qp + i * RT + n * V));
      for (int k = 0; k < KS; ++k) {
        const __m512bh kw = bh(bcast_word(keys + k * hp + i));
        for (int n = 0; n < NV; ++n) acc[k][n] = _mm512_dpbf16_ps(acc[k][n], q[n], kw);
      }
    }
    const F ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int n = 0; n < NV; ++n) {
      const __m512i pv = _mm512_loadu_si512(t.pos + n * V);
      for (int k = 0; k < KS; ++k)
        _mm512_storeu_ps(s + (j0 + k) * RT + n * V,
                         S::select(S::ge(pv, kpos0 + j0 + k), _mm512_mul_ps(acc[k][n], scale), ninf));
    }
  }
  template <int NV>
  static void scores(const TileRows& t, const KeyBlock& b, int nk, const AttnArgs& a, float* s) {
    const F scale = _mm512_set1_ps(a.scale);
    for (int j0 = 0; j0 < nk; j0 += KS) score_tile<NV>(t, pairs(a.head_dim), b.kvp, b.kpos0, j0, scale, s);
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
  static void value_tile(float* ot, int d0, const float* vpk, int vd, int np, const Masks& m, const float* pp,
                         const F* alpha) {
    F acc[ND][NV];
    for (int dd = 0; dd < ND; ++dd)
      for (int n = 0; n < NV; ++n)
        acc[dd][n] = _mm512_mul_ps(_mm512_loadu_ps(ot + (d0 + dd) * RT + n * V), alpha[n]);
    for (int i = 0; i < np; ++i) {
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

  template <int NV>
  static void values(float* ot, const TileRows& t, const KeyBlock& b, int nk, const F* alpha, const float* s,
                     const AttnArgs& a, float* pp) {
    const int np = pairs(nk), vd = a.vd();
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
        _mm512_storeu_si512(pp + i * RT + n * V, interleave(x, y));
      }
      if (any) {
        m.first_pair[m.n_first] = i;
        for (int n = 0; n < NV; ++n) m.first[m.n_first][n] = f[n];
        ++m.n_first;
      }
    }
    const float* vals = b.kvp + int64_t(KB) * pairs(a.head_dim);
    int d = 0;
    for (; d + DS <= vd; d += DS) value_tile<NV, DS>(ot, d, vals, vd, np, m, pp, alpha);
    for (; d < vd; ++d) value_tile<NV, 1>(ot, d, vals, vd, np, m, pp, alpha);
  }
};

}  // namespace

Kernel avx512_bf16_attention_kernel() { return Tiled<Avx512Bf16Attn, Bf16Products>::kernel(); }

}  // namespace mx::attn_detail
