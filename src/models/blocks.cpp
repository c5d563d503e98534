#include "models/blocks.h"

#include <cmath>
#include <cstring>


namespace mx {

Tensor bind_norm(WeightBinder& wb, const std::string& name, int dim) {
  return wb.need(name, name, {dim}, MX_FLOAT_WEIGHTS);
}

RopeArgs place_rope(DeviceWeights& dw, const Rope& r) {
  return {r.rotary_dim(), r.style() == RopeStyle::Interleaved, r.mscale(), dw.floats(r.inv_freq())};
}

GqaAttention::GqaAttention(WeightBinder& wb, const std::string& prefix, const ModelConfig& c)
    : dim_(c.hidden_size),
      n_heads_(c.num_attention_heads),
      n_kv_heads_(c.num_key_value_heads),
      head_dim_(c.head_dim),
      norm_eps_(c.rms_norm_eps),
      scale_(attention_scale(c)) {
  const int qd = n_heads_ * head_dim_, kvd = n_kv_heads_ * head_dim_;
  wq_ = wb.linear(prefix + ".q_proj", prefix + ".wq", qd, dim_);
  wk_ = wb.linear(prefix + ".k_proj", prefix + ".wk", kvd, dim_);
  wv_ = wb.linear(prefix + ".v_proj", prefix + ".wv", kvd, dim_);
  wo_ = wb.linear(prefix + ".o_proj", prefix + ".wo", dim_, qd);
  if (c.attention_bias) {
    bq_ = wb.need(prefix + ".q_proj.bias", prefix + ".bq", {qd}, MX_FLOAT_WEIGHTS);
    bk_ = wb.need(prefix + ".k_proj.bias", prefix + ".bk", {kvd}, MX_FLOAT_WEIGHTS);
    bv_ = wb.need(prefix + ".v_proj.bias", prefix + ".bv", {kvd}, MX_FLOAT_WEIGHTS);
  }
  if (c.qk_norm) {
    q_norm_ = bind_norm(wb, prefix + ".q_norm.weight", head_dim_);
    k_norm_ = bind_norm(wb, prefix + ".k_norm.weight", head_dim_);
  }
  rope_ = Rope(c, head_dim_, c.rotary_dim(), RopeStyle::RotateHalf);
  const ShardPlan& sp = wb.shard();
  if (sp.tp_on()) {  // this rank's heads and the KV heads they read (the group stays whole)
    const int nh = sp.part(n_heads_, "attention heads"), nkv = sp.part(n_kv_heads_, "KV heads");
    const int h0 = sp.begin(n_heads_), g0 = sp.begin(n_kv_heads_), hd = head_dim_;
    wq_ = slice_rows(wq_, int64_t(h0) * hd, int64_t(nh) * hd);
    wk_ = slice_rows(wk_, int64_t(g0) * hd, int64_t(nkv) * hd);
    wv_ = slice_rows(wv_, int64_t(g0) * hd, int64_t(nkv) * hd);
    wo_ = slice_cols(wo_.whole, int64_t(h0) * hd, int64_t(nh) * hd);
    bq_ = slice_vec(bq_, int64_t(h0) * hd, int64_t(nh) * hd);
    bk_ = slice_vec(bk_, int64_t(g0) * hd, int64_t(nkv) * hd);
    bv_ = slice_vec(bv_, int64_t(g0) * hd, int64_t(nkv) * hd);
    n_heads_ = nh;
    n_kv_heads_ = nkv;
  }
}

void GqaAttention::place(DeviceWeights& dw) {
  d_.wq = dw.matrix(wq_), d_.wk = dw.matrix(wk_), d_.wv = dw.matrix(wv_), d_.wo = dw.matrix(wo_);
  d_.bq = dw.vector(bq_), d_.bk = dw.vector(bk_), d_.bv = dw.vector(bv_);
  d_.q_norm = dw.vector(q_norm_), d_.k_norm = dw.vector(k_norm_);
  d_.rope = place_rope(dw, rope_);
}

size_t GqaAttention::scratch_bytes(int T) const {
  const size_t qd = size_t(n_heads_) * head_dim_, kvd = size_t(n_kv_heads_) * head_dim_;
  return (2 * T * qd + 2 * T * kvd) * 4 + 4 * 256;
}

size_t GqaAttention::bytes_per_token() const {
  size_t n = 0;
  for (const Tensor* t : {&wq_, &wk_, &wv_, &bq_, &bk_, &bv_, &q_norm_, &k_norm_}) n += t->storage_bytes();
  n += wo_.storage_bytes();
  return n;
}

void GqaAttention::forward(ForwardCtx& ctx, int kv_layer, const float* x, float* out) const {
  Backend& b = ctx.b;
  const int T = ctx.n_tokens, qd = n_heads_ * head_dim_, kvd = n_kv_heads_ * head_dim_;
  float* q = ctx.arena.alloc(size_t(T) * qd);
  float* k = ctx.arena.alloc(size_t(T) * kvd);
  float* v = ctx.arena.alloc(size_t(T) * kvd);
  float* const qkv[] = {q, k, v};
  const DevWeight* const w_qkv[] = {&d_.wq, &d_.wk, &d_.wv};
  b.matmul_many(qkv, x, w_qkv, 3, T);
  if (d_.bq) {
    b.add_bias(q, d_.bq, T, qd);
    b.add_bias(k, d_.bk, T, kvd);
    b.add_bias(v, d_.bv, T, kvd);
  }
  if (d_.q_norm) {  // per-head RMSNorm before RoPE (Qwen3, GLM-4.5 use_qk_norm)
    b.rmsnorm(q, q, d_.q_norm, int64_t(T) * n_heads_, head_dim_, norm_eps_);
    b.rmsnorm(k, k, d_.k_norm, int64_t(T) * n_kv_heads_, head_dim_, norm_eps_);
  }
  b.rope(q, ctx.pos, T, n_heads_, qd, head_dim_, d_.rope);
  b.rope(k, ctx.pos, T, n_kv_heads_, kvd, head_dim_, d_.rope);
  const PagedKV kv = ctx.layer_kv(kv_layer);
  b.kv_write(kv, k, kvd, v, kvd, ctx.slots, T);
  float* attn = ctx.arena.alloc(size_t(T) * qd);
  b.paged_attention(attn, q, qd, kv, {n_heads_, n_kv_heads_, head_dim_, scale_}, ctx.block_tables, ctx.max_blocks,
                    ctx.seq, ctx.pos, T);
  b.matmul(out, attn, d_.wo, T);
}

SwigluMlp::SwigluMlp(WeightBinder& wb, const std::string& prefix, int d, int h, int split_rank, int split_size)
    : hidden_(h) {
  gate_ = wb.linear(prefix + ".gate_proj", prefix + ".gate", h, d);
  up_ = wb.linear(prefix + ".up_proj", prefix + ".up", h, d);
  down_ = wb.linear(prefix + ".down_proj", prefix + ".down", d, h);
  if (split_size > 1) {
    MX_CHECK(h % split_size == 0, "{}: cannot split {} hidden units over {} ranks", prefix, h, split_size);
    hidden_ = h / split_size;
    const int64_t h0 = int64_t(h) * split_rank / split_size;
    gate_ = slice_rows(gate_, h0, hidden_);
    up_ = slice_rows(up_, h0, hidden_);
    down_ = slice_cols(down_.whole, h0, hidden_);
  }
}

size_t SwigluMlp::bytes_per_token() const { return gate_.storage_bytes() + up_.storage_bytes() + down_.storage_bytes(); }

void SwigluMlp::place(DeviceWeights& dw) {
  d_gate_ = dw.matrix(gate_), d_up_ = dw.matrix(up_), d_down_ = dw.matrix(down_);
}

void SwigluMlp::forward(ForwardCtx& ctx, const float* x, float* out) const {
  const int T = ctx.n_tokens;
  const size_t mark = ctx.arena.mark();
  float* g = ctx.arena.alloc(size_t(T) * hidden_);
  float* u = ctx.arena.alloc(size_t(T) * hidden_);
  float* const gu[] = {g, u};
  const DevWeight* const w_gu[] = {&d_gate_, &d_up_};
  ctx.b.matmul_many(gu, x, w_gu, 2, T);
  ctx.b.silu_mul(g, g, u, int64_t(T) * hidden_);
  ctx.b.matmul(out, g, d_down_, T);
  ctx.arena.rewind(mark);
}

}  // namespace mx
