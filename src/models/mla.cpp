#include "models/mla.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "quant/dequantize.h"

namespace mx {

MlaAttention::MlaAttention(WeightBinder& wb, const std::string& p, const ModelConfig& c)
    : dim_(c.hidden_size),
      n_heads_(c.num_attention_heads),
      P_(c.mla_cfg.qk_nope_head_dim),
      R_(c.mla_cfg.qk_rope_head_dim),
      Vd_(c.mla_cfg.v_head_dim),
      Lkv_(c.mla_cfg.kv_lora_rank),
      q_rank_(c.mla_cfg.q_lora_rank),
      eps_(c.rms_norm_eps),
      scale_(attention_scale(c)) {
  const int H = dim_, qd = n_heads_ * (P_ + R_);
  if (q_rank_ > 0) {
    q_a_ = wb.linear(p + ".q_a_proj", p + ".q_a", q_rank_, H);
    q_a_norm_ = bind_norm(wb, p + ".q_a_layernorm.weight", q_rank_);
    q_b_ = wb.linear(p + ".q_b_proj", p + ".q_b", qd, q_rank_);
  } else {
    q_proj_ = wb.linear(p + ".q_proj", p + ".q_proj", qd, H);
  }
  kv_a_ = wb.linear(p + ".kv_a_proj_with_mqa", p + ".kv_a", Lkv_ + R_, H);
  kv_a_norm_ = bind_norm(wb, p + ".kv_a_layernorm.weight", Lkv_);
  kv_b_ = wb.linear(p + ".kv_b_proj", p + ".kv_b", n_heads_ * (P_ + Vd_), Lkv_);
  o_proj_ = wb.linear(p + ".o_proj", p + ".o_proj", H, n_heads_ * Vd_);
  rope_ = Rope(c, R_, R_, RopeStyle::Interleaved);
  const ShardPlan& sp = wb.shard();
  if (sp.tp_on()) {  // this rank's heads; the shared latent projection stays whole
    const int nh = sp.part(n_heads_, "attention heads"), h0 = sp.begin(n_heads_);
    q_b_ = slice_rows(q_b_, int64_t(h0) * (P_ + R_), int64_t(nh) * (P_ + R_));
    q_proj_ = slice_rows(q_proj_, int64_t(h0) * (P_ + R_), int64_t(nh) * (P_ + R_));
    kv_b_ = slice_rows(kv_b_, int64_t(h0) * (P_ + Vd_), int64_t(nh) * (P_ + Vd_));
    o_proj_ = slice_cols(o_proj_, int64_t(h0) * Vd_, int64_t(nh) * Vd_, o_own_, o_scales_);
    n_heads_ = nh;
  }
  if (kv_b_.empty()) return;  // binding failed; the binder reports it
  if (kv_b_.dtype == DType::MXFP4 || kv_b_.dtype == DType::F8_E4M3) {
    // The absorbed form splits kv_b_proj per head: work on plain values, as
    // vLLM and sglang dequantize it first (docs/architectures.md 5.4).
    kv_b_plain_ = dequantize_f32(kv_b_);
    kv_b_ = kv_b_plain_.t;
  }
  // Absorption weights. kv_b_proj rows of head h: [P rows of W_UK | Vd rows of W_UV].
  const size_t esz = dtype_bits(kv_b_.dtype) / 8;
  for (int h = 0; h < n_heads_; ++h) {
    const char* head = static_cast<const char*>(kv_b_.data) + size_t(h) * (P_ + Vd_) * Lkv_ * esz;
    OwnedTensor t = OwnedTensor::make(kv_b_.dtype, {Lkv_, P_});
    for (int r = 0; r < P_; ++r)
      for (int cc = 0; cc < Lkv_; ++cc)
        std::memcpy(static_cast<char*>(t.t.data) + (size_t(cc) * P_ + r) * esz,
                    head + (size_t(r) * Lkv_ + cc) * esz, esz);
    w_uk_t_.push_back(std::move(t));
    w_uv_.emplace_back(kv_b_.dtype, std::vector<int64_t>{Vd_, Lkv_},
                       const_cast<char*>(head + size_t(P_) * Lkv_ * esz));
  }
}

size_t MlaAttention::bytes_per_token() const {
  size_t n = 0;
  for (const Tensor* t : {&q_a_, &q_a_norm_, &q_b_, &q_proj_, &kv_a_, &kv_a_norm_, &kv_b_, &o_proj_})
    n += t->storage_bytes();
  return n;  // the absorbed copies of W_UK hold the same values as kv_b_proj
}

size_t MlaAttention::scratch_bytes(int T, int max_ctx, int n_workers) const {
  const size_t qd = size_t(n_heads_) * (P_ + R_), lat = size_t(n_heads_) * (Lkv_ + R_);
  size_t n = size_t(T) * (q_rank_ + qd + Lkv_ + R_) * 4;  // q_a, q, ckv
  n += size_t(T) * lat * 4 + size_t(T) * n_heads_ * Lkv_ * 4 + size_t(T) * n_heads_ * Vd_ * 4;
  n += 2 * size_t(T) * std::max({P_, Lkv_, Vd_}) * 4 * n_workers;  // per-head gathers
  return n + 16 * 64 + paged_attention_scratch(max_ctx, n_workers);
}

void MlaAttention::forward(ForwardCtx& ctx, int kv_layer, const float* x, float* out) const {
  const int T = ctx.n_tokens, nH = n_heads_, QH = P_ + R_, KW = Lkv_ + R_;
  Arena& a = ctx.arena;
  float* q = a.alloc(size_t(T) * nH * QH);
  if (q_rank_ > 0) {
    float* qa = a.alloc(size_t(T) * q_rank_);
    matmul(qa, x, q_a_, T, ctx.pool);
    rmsnorm(qa, qa, q_a_norm_, T, q_rank_, eps_);
    matmul(q, qa, q_b_, T, ctx.pool);
  } else {
    matmul(q, x, q_proj_, T, ctx.pool);
  }
  float* ckv = a.alloc(size_t(T) * KW);
  matmul(ckv, x, kv_a_, T, ctx.pool);
  float* qfull = a.alloc(size_t(T) * nH * KW);  // per head [q_lat (Lkv) | rope(q_pe) (R)]
  ctx.pool.parallel_for(T, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* c = ckv + t * KW;
      rmsnorm(c, c, kv_a_norm_, 1, Lkv_, eps_);
      rope_.apply(c + Lkv_, 1, R_, ctx.pos[t]);
      rope_.apply(q + t * nH * QH + P_, nH, QH, ctx.pos[t]);
      for (int h = 0; h < nH; ++h)
        std::memcpy(qfull + (size_t(t) * nH + h) * KW + Lkv_, q + (size_t(t) * nH + h) * QH + P_,
                    R_ * sizeof(float));
      auto [blk, slot] = ctx.slot(int(t));
      std::memcpy(ctx.kv.k(kv_layer, blk) + size_t(slot) * KW, c, KW * sizeof(float));
    }
  });
  // q absorption per head: q_lat[t, h] = W_UK_T[h] q_nope[t, h]; heads in parallel,
  // each matmul runs on the calling worker (nested parallel_for runs inline).
  const int nw = ctx.pool.size();
  const size_t M = size_t(std::max({P_, Lkv_, Vd_}));  // per-worker gather buffers hold T x M
  float* gather_all = a.alloc(size_t(nw) * T * M * 2);
  ctx.pool.parallel_for(nw, [&](int64_t wb, int64_t we) {
    for (int64_t w = wb; w < we; ++w) {
      float* qn = gather_all + size_t(w) * T * M * 2;
      float* ql = qn + size_t(T) * M;
      for (int h = int(w); h < nH; h += nw) {
        for (int t = 0; t < T; ++t)
          std::memcpy(qn + size_t(t) * P_, q + (size_t(t) * nH + h) * QH, P_ * sizeof(float));
        matmul(ql, qn, w_uk_t_[h].t, T, ctx.pool);
        for (int t = 0; t < T; ++t)
          std::memcpy(qfull + (size_t(t) * nH + h) * KW, ql + size_t(t) * Lkv_, Lkv_ * sizeof(float));
      }
    }
  });
  float* olat = a.alloc(size_t(T) * nH * Lkv_);
  paged_attention(ctx, kv_layer, {nH, nH, KW, Lkv_, true, scale_}, qfull, olat);
  // o[t, h] = W_UV[h] o_lat[t, h]
  float* o = a.alloc(size_t(T) * nH * Vd_);
  ctx.pool.parallel_for(nw, [&](int64_t wb, int64_t we) {
    for (int64_t w = wb; w < we; ++w) {
      float* ol = gather_all + size_t(w) * T * M * 2;
      float* ov = ol + size_t(T) * M;
      for (int h = int(w); h < nH; h += nw) {
        for (int t = 0; t < T; ++t)
          std::memcpy(ol + size_t(t) * Lkv_, olat + (size_t(t) * nH + h) * Lkv_, Lkv_ * sizeof(float));
        matmul(ov, ol, w_uv_[h], T, ctx.pool);
        for (int t = 0; t < T; ++t)
          std::memcpy(o + (size_t(t) * nH + h) * Vd_, ov + size_t(t) * Vd_, Vd_ * sizeof(float));
      }
    }
  });
  matmul(out, o, o_proj_, T, ctx.pool);
}

}  // namespace mx
