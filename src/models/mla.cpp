#include "models/mla.h"

#include <algorithm>
#include <cstring>

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
    o_proj_ = slice_cols(o_proj_.whole, int64_t(h0) * Vd_, int64_t(nh) * Vd_);
    n_heads_ = nh;
  }
  if (kv_b_.empty()) return;  // binding failed; the binder reports it
  kv_b_read_ = kv_b_;
  kv_b_ = wb.on_host(kv_b_);   // split per head on the host below
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
  for (const Tensor* t : {&q_a_, &q_a_norm_, &q_b_, &q_proj_, &kv_a_, &kv_a_norm_, &kv_b_})
    n += t->storage_bytes();
  return n + o_proj_.storage_bytes();  // the absorbed copies of W_UK hold the same values as kv_b_proj
}

void MlaAttention::place(DeviceWeights& dw) {
  d_.q_a = dw.matrix(q_a_), d_.q_b = dw.matrix(q_b_), d_.q_proj = dw.matrix(q_proj_);
  d_.kv_a = dw.matrix(kv_a_), d_.o_proj = dw.matrix(o_proj_);
  d_.q_a_norm = dw.vector(q_a_norm_), d_.kv_a_norm = dw.vector(kv_a_norm_);
  dw.count_read(kv_b_read_);  // read on the host once: W_UK and W_UV below are made from it
  for (int h = 0; h < n_heads_; ++h) {
    d_.w_uk_t.push_back(dw.derived(w_uk_t_[h].t));
    d_.w_uv.push_back(dw.derived(w_uv_[h]));
  }
  d_.rope = place_rope(dw, rope_);
}

size_t MlaAttention::scratch_bytes(int T) const {
  const size_t qd = size_t(n_heads_) * (P_ + R_), lat = size_t(n_heads_) * (Lkv_ + R_);
  size_t n = size_t(T) * (q_rank_ + qd + Lkv_ + R_) * 4;  // q_a, q, ckv
  n += size_t(T) * lat * 4 + size_t(T) * n_heads_ * Lkv_ * 4 + size_t(T) * n_heads_ * Vd_ * 4;
  return n + 16 * 256;
}

void MlaAttention::forward(ForwardCtx& ctx, int kv_layer, const float* x, float* out) const {
  Backend& b = ctx.b;
  const int T = ctx.n_tokens, nH = n_heads_, QH = P_ + R_, KW = Lkv_ + R_;
  DevArena& a = ctx.arena;
  float* q = a.alloc(size_t(T) * nH * QH);
  // [c | k_pe] per token: c normalised, k_pe and q_pe rotated; the slot caches both.
  float* ckv = a.alloc(size_t(T) * KW);
  if (q_rank_ > 0) {
    float* qa = a.alloc(size_t(T) * q_rank_);
    float* const ys[] = {qa, ckv};
    const DevWeight* const ws[] = {&d_.q_a, &d_.kv_a};
    b.matmul_many(ys, x, ws, 2, T);
    b.rmsnorm(qa, qa, d_.q_a_norm, T, q_rank_, eps_);
    b.matmul(q, qa, d_.q_b, T);
  } else {
    float* const ys[] = {q, ckv};
    const DevWeight* const ws[] = {&d_.q_proj, &d_.kv_a};
    b.matmul_many(ys, x, ws, 2, T);
  }
  b.rmsnorm_strided(ckv, ckv, d_.kv_a_norm, T, Lkv_, KW, eps_);
  b.rope(ckv + Lkv_, ctx.pos, T, 1, KW, R_, d_.rope);
  b.rope(q + P_, ctx.pos, T, nH, nH * QH, QH, d_.rope);
  const PagedKV kv = ctx.layer_kv(kv_layer);
  b.kv_write(kv, ckv, KW, nullptr, 0, ctx.slots, T);
  // Per head [q_lat (Lkv) | rope(q_pe) (R)], q_lat[t, h] = W_UK_T[h] q_nope[t, h].
  float* qfull = a.alloc(size_t(T) * nH * KW);
  b.copy_rows(qfull + Lkv_, KW, q + P_, QH, int64_t(T) * nH, R_);
  b.head_matmul(qfull, int64_t(nH) * KW, KW, q, int64_t(nH) * QH, QH, d_.w_uk_t, T);
  float* olat = a.alloc(size_t(T) * nH * Lkv_);
  AttnArgs args{nH, 1, KW, scale_};
  args.v_dim = Lkv_, args.values_in_k = true;
  b.paged_attention(olat, qfull, nH * KW, kv, args, ctx.block_tables, ctx.max_blocks, ctx.seq, ctx.pos, T);
  // o[t, h] = W_UV[h] o_lat[t, h]
  float* o = a.alloc(size_t(T) * nH * Vd_);
  b.head_matmul(o, int64_t(nH) * Vd_, Vd_, olat, int64_t(nH) * Lkv_, Lkv_, d_.w_uv, T);
  b.matmul(out, o, d_.o_proj, T);
}

}  // namespace mx
