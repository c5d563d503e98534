#pragma once
// The tiled attention kernel (attention.h states the contract and the sequence
// of operations every row performs), written once over a SIMD traits class S
// and a products class P, and instantiated by attention_avx512.cpp (16 lanes),
// attention_avx2.cpp (8 lanes) and attention_bf16_avx512.cpp (16 lanes, bf16
// products). Include only from a file compiled for the traits' ISA.
//
// S provides: F (float vector of V lanes), I (int32 vector), M (lane mask);
// KS (keys per Q.K^T micro-tile) and DS (value dims per P.V micro-tile), chosen
// so the 2*KS / 2*DS accumulators fit the register file; zero, set1, load,
// store, bcast (one float to every lane), fma(a, b, c) = a*b+c rounded once,
// mul, add, sub, div, max (max(a, b) is b when either is NaN), loadi, ge(pos, k)
// (lanes whose pos >= k), eq, select(m, a, b) (m ? a : b), mask_fma(a, b, c, m)
// (a*b+c in lanes of m, c elsewhere) and exp (below, per ISA).
//
// P computes the two products of a key block (F32Products below: f32 FMAs on
// the cache's rows; attention_bf16_avx512.cpp: vdpbf16ps on bf16 pairs):
//   q_floats(a), kv_floats(a), p_floats(a): scratch floats of its packed queries
//     (per tile), packed keys and values (per block) and packed weights;
//   pack_queries(qt, hd, pos, qp): once per tile and item, from qt[d][RT] and the rows' positions;
//   kReadsNarrow: whether it takes BF16 and F8_E4M3 caches' rows as they are
//     (else they are widened to f32 first);
//   pack_block(b, n, a): once per key block and item, into b.kvp from the rows
//     b.kp[j], b.vp[j] (j < n) of the block's keys and values;
//   prefetch_step(b) (a line of the next block, KeyBlock::Next) where it computes:
//     F32Products calls prefetch_rest(b) in pack_block, Bf16Products once per
//     iteration of its products' loops; Tiled prefetches what is left after the block;
//   scores<NV>(t, b, nk, a, s): s[j][RT] for the block's keys j < nk, -inf where
//     a row's position is below the key's;
//   values<NV>(ot, t, b, nk, alpha, s, a, pp): o = o * alpha + P.V over keys j < nk;
//   both for the tile's first NV vectors of rows (1 when the second holds padding only).
//
// Layout of a tile: RT = 2V rows in the lanes of two vectors. Per tile, in the
// worker's scratch: qt[d][RT] (the rows' queries, transposed), ot[d][RT] (the
// running outputs o), m[RT], l[RT] (and on the stack pos[RT], -1 in padding lanes). Per key
// block: s[KB][RT] (scores, then weights P in place). Only explicit intrinsics
// do float math here, so compiler contraction cannot change a row's sequence.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "backends/cpu/attention.h"

namespace mx::attn_detail {

// What a tile and a key block hand to the products class.
struct TileRows {
  const float* qt;    // queries, transposed: qt[d][RT]
  const float* qp;    // P's packed queries
  const int32_t* pos; // the rows' positions (-1: padding)
};
struct KeyBlock {
  const void* const* kp;  // the block's key rows (past the block's end: a zero row)
  const void* const* vp;  // its value rows (only the block's own)
  DType dt;               // theirs: F32, or the cache's where P reads narrow rows (kReadsNarrow)
  float* kvp;             // P's packed keys and values
  int kpos0;              // the block's first position
  const int32_t* tile_pos;  // the item's tiles' row positions (RT per tile, -1: padding)
  int n_tiles;
  // The next block's rows, read in place (n = 0: none, or widened), for P to
  // prefetch while it computes this one: a line per iteration of its products'
  // loops (prefetch_step), the rest once the block is done (prefetch_rest). A long
  // context's cache comes from DRAM, and the core can only have so many misses in
  // flight: prefetched in one burst, the lines stalled it at the prefetches and
  // then left the memory idle while the block computed (BENCHMARKS.md, "Decode
  // attention: what the kernel spent its time on": one thread, ctx 16384 from
  // DRAM, 6.3 -> 8.8 GB/s with this and the other changes of that section).
  struct Next {
    const void* const* kp;
    const void* const* vp;
    int n, k_bytes, v_bytes;
    mutable int row = 0, off = 0;  // the next line to prefetch: row, byte offset in its key then value
  } next;
};

// Whether a tile's rows all sit in its first V / 2 lanes (padding is a suffix of the tile's
// lanes): a half tile, such as a decode token's GQA group. Tiled::block takes its exps two
// keys at a time; the bf16 products put two keys or two value dims side by side.
template <int V>
inline bool half_tile(const int32_t* pos) {
  return pos[V / 2] < 0;
}

// Prefetches the next block's next line (row by row, its key's lines then its value's).
// Written out (not a lambda): GCC 12 dropped a lambda whose only statements were prefetches.
__attribute__((always_inline)) inline void prefetch_step(const KeyBlock& b) {
  const KeyBlock::Next& x = b.next;
  if (x.row >= x.n) return;
  const char* p = x.off < x.k_bytes ? static_cast<const char*>(x.kp[x.row]) + x.off
                                    : static_cast<const char*>(x.vp[x.row]) + (x.off - x.k_bytes);
  _mm_prefetch(p, _MM_HINT_T0);
  if ((x.off += 64) >= x.k_bytes + x.v_bytes) x.off = 0, ++x.row;
}
// The lines the loops did not reach (a short block, or one with few products).
inline void prefetch_rest(const KeyBlock& b) {
  while (b.next.row < b.next.n) prefetch_step(b);
}

// The f32 products: FMAs on the cache's rows (widened to f32), one key (Q.K^T)
// or one value dim (P.V) broadcast against the tile's rows in the lanes.
template <class S>
struct F32Products {
  using F = typename S::F;
  using M = typename S::M;
  static constexpr int V = S::V, RT = 2 * V, KS = S::KS, DS = S::DS;

  static constexpr bool kReadsNarrow = false;  // rows reach it as f32 (bf16 / fp8 caches widened first)
  static int64_t q_floats(const AttnArgs&) { return 0; }
  static int64_t kv_floats(const AttnArgs&) { return 0; }
  static int64_t p_floats(const AttnArgs&) { return 0; }
  static void pack_queries(const float*, int, const int32_t*, float*) {}
  // The next block's lines at once: spread over the FMA loops, they cost more than they gained
  // (BENCHMARKS.md, "Decode attention: what the kernel spent its time on").
  static void pack_block(const KeyBlock& b, int, const AttnArgs&) { prefetch_rest(b); }

  // Keys [j0, j0 + KS): s[j] = (fma chain over d) * scale, -inf where the row's position is below the key's;
  // for the tile's first NV vectors of rows.
  template <int NV>
  static void score_tile(const TileRows& t, int hd, const KeyBlock& b, int j0, F scale, float* s) {
    F acc[KS][NV];
    for (int k = 0; k < KS; ++k)
      for (int n = 0; n < NV; ++n) acc[k][n] = S::zero();
    for (int d = 0; d < hd; ++d) {
      F q[NV];
      for (int n = 0; n < NV; ++n) q[n] = S::load(t.qt + d * RT + n * V);
      for (int k = 0; k < KS; ++k) {
        const F kv = S::bcast(static_cast<const float*>(b.kp[j0 + k]) + d);
        for (int n = 0; n < NV; ++n) acc[k][n] = S::fma(kv, q[n], acc[k][n]);
      }
    }
    const F ninf = S::set1(-std::numeric_limits<float>::infinity());
    for (int n = 0; n < NV; ++n) {
      const auto pv = S::loadi(t.pos + n * V);
      for (int k = 0; k < KS; ++k)
        S::store(s + (j0 + k) * RT + n * V, S::select(S::ge(pv, b.kpos0 + j0 + k), S::mul(acc[k][n], scale), ninf));
    }
  }
  template <int NV>
  static void scores(const TileRows& t, const KeyBlock& b, int nk, const AttnArgs& a, float* s) {
    const F scale = S::set1(a.scale);
    for (int j0 = 0; j0 < nk; j0 += KS) score_tile<NV>(t, a.head_dim, b, j0, scale, s);
  }

  // o[d0 .. d0+ND) = o * alpha + sum_j P_j v_j[d] (masked per row) over the block's nk keys.
  template <int NV, int ND>
  static void value_tile(float* ot, int d0, const TileRows& t, const KeyBlock& b, int nk, const float* s,
                         const F* alpha) {
    F acc[ND][NV];
    for (int dd = 0; dd < ND; ++dd)
      for (int n = 0; n < NV; ++n) acc[dd][n] = S::mul(S::load(ot + (d0 + dd) * RT + n * V), alpha[n]);
    decltype(S::loadi(t.pos)) pos[NV];
    for (int n = 0; n < NV; ++n) pos[n] = S::loadi(t.pos + n * V);
    for (int j = 0; j < nk; ++j) {
      F w[NV];
      M m[NV];
      for (int n = 0; n < NV; ++n) w[n] = S::load(s + j * RT + n * V), m[n] = S::ge(pos[n], b.kpos0 + j);
      const float* v = static_cast<const float*>(b.vp[j]) + d0;
      for (int dd = 0; dd < ND; ++dd) {
        const F x = S::bcast(v + dd);
        for (int n = 0; n < NV; ++n) acc[dd][n] = S::mask_fma(x, w[n], acc[dd][n], m[n]);
      }
    }
    for (int dd = 0; dd < ND; ++dd)
      for (int n = 0; n < NV; ++n) S::store(ot + (d0 + dd) * RT + n * V, acc[dd][n]);
  }
  template <int NV>
  static void values(float* ot, const TileRows& t, const KeyBlock& b, int nk, const F* alpha, const float* s,
                     const AttnArgs& a, float*) {
    const int vd = a.vd();
    int d = 0;
    for (; d + DS <= vd; d += DS) value_tile<NV, DS>(ot, d, t, b, nk, s, alpha);
    for (; d < vd; ++d) value_tile<NV, 1>(ot, d, t, b, nk, s, alpha);
  }
};

template <class S, class P = F32Products<S>>
struct Tiled {
  using F = typename S::F;
  using M = typename S::M;
  static constexpr int V = S::V, RT = 2 * V, KB = kAttnKeyBlock, KS = S::KS;
  static constexpr int TG = 4;  // row tiles per work item: K/V blocks are read (widened) once for all of them
  static constexpr int kItemRows = TG * RT;

  static int64_t up(int64_t n) { return (n + 15) / 16 * 16; }
  struct Layout {
    int64_t qt, ot, m, l, s, kw, vw, zero, qp, kvp, pp, total;
  };
  static Layout layout(const AttnArgs& a) {
    const int64_t hd = a.head_dim, vd = a.vd();
    Layout L{};
    int64_t o = 0;
    L.qt = o, o += up(TG * hd * RT);
    L.ot = o, o += up(TG * vd * RT);
    L.m = o, o += TG * RT;
    L.l = o, o += TG * RT;
    L.s = o, o += KB * RT;
    const int64_t widened = P::kReadsNarrow ? 0 : 1;  // rows widened to f32 here, or read in place
    L.kw = o, o += widened * up(KB * hd);
    L.vw = o, o += widened * up(KB * vd);
    L.zero = o, o += up(std::max(hd, vd));
    L.qp = o, o += TG * up(P::q_floats(a));
    L.kvp = o, o += up(P::kv_floats(a));
    L.pp = o, o += up(P::p_floats(a));
    L.total = o;
    return L;
  }
  static int64_t scratch_floats(const AttnArgs& a) { return layout(a).total; }

  // One key block [kpos0, kpos0 + nk) for one tile: scores, the online softmax's rescale, P.V; for
  // its first NV vectors of rows (a tile whose rows fit one vector, e.g. a decode token's GQA group,
  // skips the second: every lane's operations are its own, so the bits do not change).
  template <int NV>
  static void block(const AttnArgs& a, const TileRows& t, float* ot, float* ml, float* ll, const KeyBlock& b, int nk,
                    float* s, float* pp) {
    P::template scores<NV>(t, b, nk, a, s);
    const F ninf = S::set1(-std::numeric_limits<float>::infinity()), zero = S::zero();
    F alpha[2];
    for (int n = 0; n < NV; ++n) {
      F mb = ninf;
      for (int j = 0; j < nk; ++j) mb = S::max(mb, S::load(s + j * RT + n * V));
      const F m_old = S::load(ml + n * V);
      const F m_new = S::max(m_old, mb);
      // A row with no key yet (a padding lane) keeps m = -inf: subtract 0 instead, so its weights are
      // exp(-inf) = 0 rather than exp(-inf - -inf) = NaN.
      const F m_use = S::select(S::eq(m_new, ninf), zero, m_new);
      alpha[n] = S::exp(S::sub(m_old, m_use));
      F l = S::mul(S::load(ll + n * V), alpha[n]);
      int j = 0;
      if (NV == 1 && half_tile<V>(t.pos)) {
        // The rows fit the low half (a decode token's GQA group): two keys per exp, the
        // low half key j's, the high half key j + 1's. Lane for lane the same operations.
        const F mu = S::low_halves(m_use, m_use);
        for (; j + 1 < nk; j += 2) {
          const F p2 = S::exp(S::sub(S::low_halves(S::load(s + j * RT), S::load(s + (j + 1) * RT)), mu));
          const F p0 = S::low_half_only(p2), p1 = S::low_half_only(S::high_half(p2));
          S::store(s + j * RT, p0);
          l = S::add(l, p0);
          S::store(s + (j + 1) * RT, p1);
          l = S::add(l, p1);
        }
      }
      for (; j < nk; ++j) {
        const F p = S::exp(S::sub(S::load(s + j * RT + n * V), m_use));
        S::store(s + j * RT + n * V, p);
        l = S::add(l, p);
      }
      S::store(ll + n * V, l);
      S::store(ml + n * V, m_new);
    }
    P::template values<NV>(ot, t, b, nk, alpha, s, a, pp);
  }

  static void run(const Call& c, const Item& it, float* scratch) {
    const AttnArgs& a = c.a;
    const PagedKV& kv = c.kv;
    const int hd = a.head_dim, vd = a.vd(), group = a.n_heads / a.n_kv_heads, bs = kv.block_size;
    const Layout L = layout(a);
    const int n_rows = it.r1 - it.r0, n_tiles = (n_rows + RT - 1) / RT;
    alignas(64) int32_t posall[TG * RT];  // the rows' positions (-1: padding)
    // Per tile: queries transposed, o = 0, m = -inf, l = 0, positions (-1: padding).
    int max_pos = -1;
    for (int tile = 0; tile < n_tiles; ++tile) {
      float* qt = scratch + L.qt + int64_t(tile) * hd * RT;
      float* ot = scratch + L.ot + int64_t(tile) * vd * RT;
      int32_t* posl = posall + tile * RT;
      std::memset(ot, 0, sizeof(float) * vd * RT);
      for (int lane = 0; lane < RT; ++lane) {
        const int r = it.r0 + tile * RT + lane;
        scratch[L.m + tile * RT + lane] = -std::numeric_limits<float>::infinity();
        scratch[L.l + tile * RT + lane] = 0.0f;
        if (r >= it.r1) {
          posl[lane] = -1;
          for (int d = 0; d < hd; ++d) qt[d * RT + lane] = 0.0f;
          continue;
        }
        const int i = r / group, h = it.g * group + r % group;
        posl[lane] = it.pos0 + i;
        max_pos = std::max(max_pos, posl[lane]);
        const float* qr = c.q + (it.t0 + i) * int64_t(c.q_stride) + int64_t(h) * hd;
        for (int d = 0; d < hd; ++d) qt[d * RT + lane] = qr[d];
      }
      P::pack_queries(qt, hd, posl, scratch + L.qp + tile * up(P::q_floats(a)));
    }
    // Rows are in ascending position, so a tile's last real lane holds its largest.
    auto tile_max = [&](int tile) {
      int m = -1;
      for (int lane = 0; lane < RT; ++lane) m = std::max(m, posall[tile * RT + lane]);
      return m;
    };
    // Rows read in place: an F32 cache's, and any cache's where P reads narrow rows.
    const bool in_place = kv.dtype == DType::F32 || P::kReadsNarrow;
    const int64_t es = dtype_bits(kv.dtype) / 8;
    const void* vbase = a.values_in_k ? kv.k : kv.v;
    const int64_t kwid = kv.k_width, vwid = a.values_in_k ? kv.k_width : kv.v_width;
    const int64_t koff = int64_t(it.g) * hd, voff = int64_t(it.g) * vd;
    // f(j, slot) for the positions j in [j0, j1): one block-table lookup (and one
    // division) per paged block, not per position; a decode item is mostly this walk.
    auto for_slots = [&](int j0, int j1, auto&& f) {
      for (int blk = j0 / bs; blk * bs < j1; ++blk) {
        const int64_t base = int64_t(it.table[blk]) * bs - int64_t(blk) * bs;
        for (int j = std::max(j0, blk * bs), end = std::min(j1, (blk + 1) * bs); j < end; ++j) f(j, base + j);
      }
    };
    float* zero = scratch + L.zero;
    std::memset(zero, 0, sizeof(float) * std::max(hd, vd));
    // The rows of this block (kp[cur], vp[cur]) and, read in place, of the next one, which
    // P prefetches while it computes this one (a long context's cache comes from DRAM).
    const void* kp[2][KB + KS];
    const void* vp[2][KB];
    // A row's address (this KV head's part of a cache slot) is a base plus the slot times a
    // stride; held in locals, as stores through k and v could otherwise alias the fields they
    // come from and be reloaded for every position.
    const char* const kbase = static_cast<const char*>(kv.k) + koff * es;
    const char* const vbase_h = static_cast<const char*>(vbase) + voff * es;
    const int64_t kstride = kwid * es, vstride = vwid * es;
    auto block_rows = [&](int kb, const void** k, const void** v) {
      const int end = std::min(kb + KB, max_pos + 1);
      if (in_place) {
        for_slots(kb, end, [k, v, kb, kbase, vbase_h, kstride, vstride](int j, int64_t slot) {
          k[j - kb] = kbase + slot * kstride;
          v[j - kb] = vbase_h + slot * vstride;
        });
        return;
      }
      for_slots(kb, end, [&](int j, int64_t slot) {  // widen this block's rows once for every tile (exact)
        float* kr = scratch + L.kw + int64_t(j - kb) * hd;
        float* vr = scratch + L.vw + int64_t(j - kb) * vd;
        const void* krow = kbase + slot * kstride;
        const void* vrow = vbase_h + slot * vstride;
        for (int d = 0; d < hd; ++d) kr[d] = kv_load(krow, kv.dtype, d);
        for (int d = 0; d < vd; ++d) vr[d] = kv_load(vrow, kv.dtype, d);
        k[j - kb] = kr, v[j - kb] = vr;
      });
    };
    const int next_v_bytes = a.values_in_k ? 0 : int(vd * es);  // MLA: the values are in the keys' lines
    int cur = 0;
    if (in_place) block_rows(0, kp[0], vp[0]);
    for (int kb = 0; kb <= max_pos; kb += KB, cur ^= 1) {
      const int ke = std::min(kb + KB, max_pos + 1);
      const int next_n = in_place ? std::max(0, std::min(KB, max_pos + 1 - (kb + KB))) : 0;
      if (next_n) block_rows(kb + KB, kp[cur ^ 1], vp[cur ^ 1]);
      if (!in_place) block_rows(kb, kp[cur], vp[cur]);
      for (int j = ke - kb; j < KB + KS; ++j) kp[cur][j] = zero;  // a micro-tile's keys past the end
      const KeyBlock b{kp[cur],  vp[cur], in_place ? kv.dtype : DType::F32, scratch + L.kvp, kb, posall, n_tiles,
                       {kp[cur ^ 1], vp[cur ^ 1], next_n, int(hd * es), next_v_bytes}};
      P::pack_block(b, ke - kb, a);
      for (int tile = 0; tile < n_tiles; ++tile) {
        const int tm = tile_max(tile);
        if (tm < kb) continue;  // no row of this tile reaches the block: identity for all of them
        const int nk = std::min(ke, tm + 1) - kb;
        const TileRows t{scratch + L.qt + int64_t(tile) * hd * RT, scratch + L.qp + tile * up(P::q_floats(a)),
                         posall + tile * RT};
        float *ot = scratch + L.ot + int64_t(tile) * vd * RT, *ml = scratch + L.m + tile * RT,
              *ll = scratch + L.l + tile * RT;
        if (posall[tile * RT + V] < 0)  // the second vector holds padding only
          block<1>(a, t, ot, ml, ll, b, nk, scratch + L.s, scratch + L.pp);
        else
          block<2>(a, t, ot, ml, ll, b, nk, scratch + L.s, scratch + L.pp);
      }
      prefetch_rest(b);
    }
    // out = o / l, back to row-major.
    for (int tile = 0; tile < n_tiles; ++tile) {
      const float* ot = scratch + L.ot + int64_t(tile) * vd * RT;
      const float* ll = scratch + L.l + tile * RT;
      alignas(64) float o[RT];
      float* dst[RT];
      for (int lane = 0; lane < RT; ++lane) {
        const int r = it.r0 + tile * RT + lane;
        const int i = r / group, h = it.g * group + r % group;
        dst[lane] = r < it.r1 ? c.out + ((it.t0 + i) * int64_t(a.n_heads) + h) * vd : nullptr;
      }
      const F l0 = S::load(ll), l1 = S::load(ll + V);
      for (int d = 0; d < vd; ++d) {
        S::store(o, S::div(S::load(ot + d * RT), l0));
        S::store(o + V, S::div(S::load(ot + d * RT + V), l1));
        for (int lane = 0; lane < RT; ++lane)
          if (dst[lane]) dst[lane][d] = o[lane];
      }
    }
  }

  static Kernel kernel() { return {kItemRows, V / 2, &scratch_floats, &run}; }
};

}  // namespace mx::attn_detail
