#include "models/blocks.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"

namespace mx {

Tensor bind_norm(WeightBinder& wb, const std::string& name, int dim) {
  return wb.need(name, name, {dim}, MX_FLOAT_WEIGHTS);
}

size_t paged_attention_scratch(int max_ctx, int n_workers) {
  return size_t(n_workers) * max_ctx * 4 + 128;
}

void paged_attention(ForwardCtx& ctx, int kv_layer, const PagedAttnShape& s, const float* q,
                     float* out) {
  const int T = ctx.n_tokens, nw = ctx.pool.size(), bs = ctx.kv.block_size();
  const int kw = ctx.kv.layout().k_width;
  const int vw = s.values_in_k ? kw : ctx.kv.layout().v_width;
  float* scores_all = ctx.arena.alloc(size_t(nw) * ctx.max_ctx);
  const int64_t items = int64_t(T) * s.n_heads;
  // One range per worker; items are dealt round-robin so the long-context tokens
  // at the end of a prefill chunk are spread over all workers. Each item's
  // reduction order depends only on its own position: batch invariant.
  ctx.pool.parallel_for(nw, [&](int64_t wb, int64_t we) {
    for (int64_t w = wb; w < we; ++w) {
      float* sc = scores_all + w * ctx.max_ctx;
      for (int64_t it = w; it < items; it += nw) {
        const int t = int(it / s.n_heads), h = int(it % s.n_heads), g = h / s.group;
        const std::vector<int>& blocks = ctx.batch.seqs[ctx.seq[t]].kv->blocks;
        const int n_ctx = ctx.pos[t] + 1;
        const float* qh = q + (size_t(t) * s.n_heads + h) * s.qk_dim;
        for (int j = 0; j < n_ctx; ++j) {
          const float* k = ctx.kv.k(kv_layer, blocks[j / bs]) + size_t(j % bs) * kw + size_t(g) * s.qk_dim;
          sc[j] = dot_f32(qh, k, s.qk_dim) * s.scale;
        }
        softmax_inplace(sc, n_ctx);
        float* o = out + (size_t(t) * s.n_heads + h) * s.v_dim;
        std::memset(o, 0, s.v_dim * sizeof(float));
        for (int j = 0; j < n_ctx; ++j) {
          const int blk = blocks[j / bs];
          const float* v = (s.values_in_k ? ctx.kv.k(kv_layer, blk) : ctx.kv.v(kv_layer, blk)) +
                           size_t(j % bs) * vw + size_t(g) * s.v_dim;
          axpy_f32(o, sc[j], v, s.v_dim);
        }
      }
    }
  });
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
    wo_ = slice_cols(wo_, int64_t(h0) * hd, int64_t(nh) * hd, wo_own_, wo_scales_);
    bq_ = slice_vec(bq_, int64_t(h0) * hd, int64_t(nh) * hd);
    bk_ = slice_vec(bk_, int64_t(g0) * hd, int64_t(nkv) * hd);
    bv_ = slice_vec(bv_, int64_t(g0) * hd, int64_t(nkv) * hd);
    n_heads_ = nh;
    n_kv_heads_ = nkv;
  }
}

size_t GqaAttention::scratch_bytes(int T, int max_ctx, int n_workers) const {
  const size_t qd = size_t(n_heads_) * head_dim_, kvd = size_t(n_kv_heads_) * head_dim_;
  return (2 * T * qd + 2 * T * kvd) * 4 + 4 * 64 + paged_attention_scratch(max_ctx, n_workers);
}

size_t GqaAttention::bytes_per_token() const {
  size_t n = 0;
  for (const Tensor* t : {&wq_, &wk_, &wv_, &wo_, &bq_, &bk_, &bv_, &q_norm_, &k_norm_}) n += t->storage_bytes();
  return n;
}

void GqaAttention::forward(ForwardCtx& ctx, int kv_layer, const float* x, float* out) const {
  const int T = ctx.n_tokens, qd = n_heads_ * head_dim_, kvd = n_kv_heads_ * head_dim_;
  float* q = ctx.arena.alloc(size_t(T) * qd);
  float* k = ctx.arena.alloc(size_t(T) * kvd);
  float* v = ctx.arena.alloc(size_t(T) * kvd);
  matmul(q, x, wq_, T, ctx.pool);
  matmul(k, x, wk_, T, ctx.pool);
  matmul(v, x, wv_, T, ctx.pool);
  if (!bq_.empty()) {
    add_bias(q, bq_, T, qd);
    add_bias(k, bk_, T, kvd);
    add_bias(v, bv_, T, kvd);
  }
  ctx.pool.parallel_for(T, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* qt = q + t * qd;
      float* kt = k + t * kvd;
      if (!q_norm_.empty()) {
        rmsnorm(qt, qt, q_norm_, n_heads_, head_dim_, norm_eps_);
        rmsnorm(kt, kt, k_norm_, n_kv_heads_, head_dim_, norm_eps_);
      }
      rope_.apply(qt, n_heads_, head_dim_, ctx.pos[t]);
      rope_.apply(kt, n_kv_heads_, head_dim_, ctx.pos[t]);
      auto [blk, slot] = ctx.slot(int(t));
      std::memcpy(ctx.kv.k(kv_layer, blk) + size_t(slot) * kvd, kt, kvd * sizeof(float));
      std::memcpy(ctx.kv.v(kv_layer, blk) + size_t(slot) * kvd, v + t * kvd, kvd * sizeof(float));
    }
  });
  float* attn = ctx.arena.alloc(size_t(T) * qd);
  paged_attention(ctx, kv_layer,
                  {n_heads_, n_heads_ / n_kv_heads_, head_dim_, head_dim_, false, scale_}, q, attn);
  matmul(out, attn, wo_, T, ctx.pool);
}

SwigluMlp::SwigluMlp(WeightBinder& wb, const std::string& prefix, int d, int h, int split_rank, int split_size)
    : dim_(d), hidden_(h) {
  gate_ = wb.linear(prefix + ".gate_proj", prefix + ".gate", h, d);
  up_ = wb.linear(prefix + ".up_proj", prefix + ".up", h, d);
  down_ = wb.linear(prefix + ".down_proj", prefix + ".down", d, h);
  if (split_size > 1) {
    MX_CHECK(h % split_size == 0, "{}: cannot split {} hidden units over {} ranks", prefix, h, split_size);
    hidden_ = h / split_size;
    const int64_t h0 = int64_t(h) * split_rank / split_size;
    gate_ = slice_rows(gate_, h0, hidden_);
    up_ = slice_rows(up_, h0, hidden_);
    down_ = slice_cols(down_, h0, hidden_, down_own_, down_scales_);
  }
}

size_t SwigluMlp::bytes_per_token() const { return gate_.storage_bytes() + up_.storage_bytes() + down_.storage_bytes(); }

void SwigluMlp::forward_rows(ForwardCtx& ctx, const float* x, float* out, int T, float* scratch) const {
  const size_t mark = ctx.arena.mark();
  float* g = scratch ? scratch : ctx.arena.alloc(size_t(T) * hidden_);
  float* u = scratch ? scratch + size_t(T) * hidden_ : ctx.arena.alloc(size_t(T) * hidden_);
  matmul(g, x, gate_, T, ctx.pool);
  matmul(u, x, up_, T, ctx.pool);
  silu_mul(g, g, u, int64_t(T) * hidden_);
  matmul(out, g, down_, T, ctx.pool);
  if (!scratch) ctx.arena.rewind(mark);
}

}  // namespace mx
