#pragma once
// The tiled attention kernel (attention.h states the contract and the sequence
// of operations every row performs), written once over a SIMD traits class S
// and instantiated by attention_avx512.cpp (16 lanes) and attention_avx2.cpp
// (8 lanes). Include only from a file compiled for the traits' ISA.
//
// S provides: F (float vector of V lanes), I (int32 vector), M (lane mask);
// KS (keys per Q.K^T micro-tile) and DS (value dims per P.V micro-tile), chosen
// so the 2*KS / 2*DS accumulators fit the register file; zero, set1, load,
// store, bcast (one float to every lane), fma(a, b, c) = a*b+c rounded once,
// mul, add, sub, div, max (max(a, b) is b when either is NaN), loadi, ge(pos, k)
// (lanes whose pos >= k), eq, select(m, a, b) (m ? a : b), mask_fma(a, b, c, m)
// (a*b+c in lanes of m, c elsewhere) and exp (below, per ISA).
//
// Layout of a tile: RT = 2V rows in the lanes of two vectors. Per tile, in the
// worker's scratch: qt[d][RT] (the rows' queries, transposed), ot[d][RT] (the
// running outputs o), m[RT], l[RT] (and on the stack pos[RT], -1 in padding lanes). Per key
// block: s[KB][RT] (scores, then weights P in place). Only explicit intrinsics
// do float math here, so compiler contraction cannot change a row's sequence.
#include <algorithm>
#include <cstring>
#include <limits>

#include "backends/cpu/attention.h"

namespace mx::attn_detail {

template <class S>
struct Tiled {
  using F = typename S::F;
  using M = typename S::M;
  static constexpr int V = S::V, RT = 2 * V, KB = kAttnKeyBlock, KS = S::KS, DS = S::DS;
  static constexpr int TG = 4;  // row tiles per work item: K/V blocks are read (widened) once for all of them
  static constexpr int kItemRows = TG * RT;

  static int64_t up(int64_t n) { return (n + 15) / 16 * 16; }
  struct Layout {
    int64_t qt, ot, m, l, s, kw, vw, zero, total;
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
    L.kw = o, o += up(KB * hd);
    L.vw = o, o += up(KB * vd);
    L.zero = o, o += up(std::max(hd, vd));
    L.total = o;
    return L;
  }
  static int64_t scratch_floats(const AttnArgs& a) { return layout(a).total; }

  // Q.K^T for keys [j0, j0 + KS) of the block (kp: their rows): s[j] = (fma chain over d) * scale,
  // -inf where the row's position is below the key's.
  static void scores(const float* qt, int hd, const float* const* kp, int j0, int kpos0, const int32_t* posl,
                     F scale, float* s) {
    F acc[KS][2];
    for (int k = 0; k < KS; ++k) acc[k][0] = S::zero(), acc[k][1] = S::zero();
    for (int d = 0; d < hd; ++d) {
      const F q0 = S::load(qt + d * RT), q1 = S::load(qt + d * RT + V);
      for (int k = 0; k < KS; ++k) {
        const F kv = S::bcast(kp[j0 + k] + d);
        acc[k][0] = S::fma(kv, q0, acc[k][0]);
        acc[k][1] = S::fma(kv, q1, acc[k][1]);
      }
    }
    const F ninf = S::set1(-std::numeric_limits<float>::infinity());
    for (int n = 0; n < 2; ++n) {
      const auto pv = S::loadi(posl + n * V);
      for (int k = 0; k < KS; ++k)
        S::store(s + (j0 + k) * RT + n * V, S::select(S::ge(pv, kpos0 + j0 + k), S::mul(acc[k][n], scale), ninf));
    }
  }

  // o[d0 .. d0+ND) = o * alpha + sum_j P_j v_j[d] (masked per row) over the block's nk keys.
  template <int ND>
  static void pv(float* ot, int d0, const float* const* vp, int nk, int kpos0, const int32_t* posl,
                 const float* s, const F* alpha) {
    F acc[ND][2];
    for (int dd = 0; dd < ND; ++dd)
      for (int n = 0; n < 2; ++n) acc[dd][n] = S::mul(S::load(ot + (d0 + dd) * RT + n * V), alpha[n]);
    const auto p0 = S::loadi(posl), p1 = S::loadi(posl + V);
    for (int j = 0; j < nk; ++j) {
      const F w0 = S::load(s + j * RT), w1 = S::load(s + j * RT + V);
      const M m0 = S::ge(p0, kpos0 + j), m1 = S::ge(p1, kpos0 + j);
      const float* v = vp[j] + d0;
      for (int dd = 0; dd < ND; ++dd) {
        const F x = S::bcast(v + dd);
        acc[dd][0] = S::mask_fma(x, w0, acc[dd][0], m0);
        acc[dd][1] = S::mask_fma(x, w1, acc[dd][1], m1);
      }
    }
    for (int dd = 0; dd < ND; ++dd)
      for (int n = 0; n < 2; ++n) S::store(ot + (d0 + dd) * RT + n * V, acc[dd][n]);
  }

  // One key block [kpos0, kpos0 + nk) for one tile.
  static void block(const AttnArgs& a, float* qt, float* ot, float* ml, float* ll, const int32_t* posl,
                    const float* const* kp, const float* const* vp, int nk, int kpos0, float* s) {
    const int hd = a.head_dim, vd = a.vd();
    const F scale = S::set1(a.scale);
    for (int j0 = 0; j0 < nk; j0 += KS) scores(qt, hd, kp, j0, kpos0, posl, scale, s);
    const F ninf = S::set1(-std::numeric_limits<float>::infinity()), zero = S::zero();
    F alpha[2];
    for (int n = 0; n < 2; ++n) {
      F mb = ninf;
      for (int j = 0; j < nk; ++j) mb = S::max(mb, S::load(s + j * RT + n * V));
      const F m_old = S::load(ml + n * V);
      const F m_new = S::max(m_old, mb);
      // A row with no key yet (a padding lane) keeps m = -inf: subtract 0 instead, so its weights are
      // exp(-inf) = 0 rather than exp(-inf - -inf) = NaN.
      const F m_use = S::select(S::eq(m_new, ninf), zero, m_new);
      alpha[n] = S::exp(S::sub(m_old, m_use));
      F l = S::mul(S::load(ll + n * V), alpha[n]);
      for (int j = 0; j < nk; ++j) {
        const F p = S::exp(S::sub(S::load(s + j * RT + n * V), m_use));
        S::store(s + j * RT + n * V, p);
        l = S::add(l, p);
      }
      S::store(ll + n * V, l);
      S::store(ml + n * V, m_new);
    }
    int d = 0;
    for (; d + DS <= vd; d += DS) pv<DS>(ot, d, vp, nk, kpos0, posl, s, alpha);
    for (; d < vd; ++d) pv<1>(ot, d, vp, nk, kpos0, posl, s, alpha);
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
    }
    // Rows are in ascending position, so a tile's last real lane holds its largest.
    auto tile_max = [&](int tile) {
      int m = -1;
      for (int lane = 0; lane < RT; ++lane) m = std::max(m, posall[tile * RT + lane]);
      return m;
    };
    const bool wide = kv.dtype == DType::F32;
    const void* vbase = a.values_in_k ? kv.k : kv.v;
    const int64_t kwid = kv.k_width, vwid = a.values_in_k ? kv.k_width : kv.v_width;
    const int64_t koff = int64_t(it.g) * hd, voff = int64_t(it.g) * vd;
    float* zero = scratch + L.zero;
    std::memset(zero, 0, sizeof(float) * std::max(hd, vd));
    const float* kp[KB + KS];
    const float* vp[KB];
    for (int kb = 0; kb <= max_pos; kb += KB) {
      const int ke = std::min(kb + KB, max_pos + 1);
      for (int j = kb; j < ke; ++j) {
        const int64_t slot = int64_t(it.table[j / bs]) * bs + j % bs;
        if (wide) {
          kp[j - kb] = static_cast<const float*>(kv.k) + slot * kwid + koff;
          vp[j - kb] = static_cast<const float*>(vbase) + slot * vwid + voff;
        } else {  // widen this block's rows once for every tile of the item (exact)
          float* kr = scratch + L.kw + int64_t(j - kb) * hd;
          float* vr = scratch + L.vw + int64_t(j - kb) * vd;
          for (int d = 0; d < hd; ++d) kr[d] = kv_load(kv.k, kv.dtype, slot * kwid + koff + d);
          for (int d = 0; d < vd; ++d) vr[d] = kv_load(vbase, kv.dtype, slot * vwid + voff + d);
          kp[j - kb] = kr, vp[j - kb] = vr;
        }
      }
      for (int j = ke - kb; j < KB + KS; ++j) kp[j] = zero;  // a micro-tile's keys past the end
      for (int tile = 0; tile < n_tiles; ++tile) {
        const int tm = tile_max(tile);
        if (tm < kb) continue;  // no row of this tile reaches the block: identity for all of them
        const int nk = std::min(ke, tm + 1) - kb;
        block(a, scratch + L.qt + int64_t(tile) * hd * RT, scratch + L.ot + int64_t(tile) * vd * RT,
              scratch + L.m + tile * RT, scratch + L.l + tile * RT, posall + tile * RT, kp, vp, nk, kb,
              scratch + L.s);
      }
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

  static Kernel kernel() { return {kItemRows, &scratch_floats, &run}; }
};

}  // namespace mx::attn_detail
