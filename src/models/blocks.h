#pragma once
// Building blocks shared by the architecture files: the per-forward context, the
// attention and feed-forward interfaces and their implementations (GQA here,
// MLA in mla.h, MoE in moe.h). Each block binds its own weights by checkpoint
// name, so a family file only says which blocks it stacks under which prefixes.
#include <string>

#include "core/arena.h"
#include "core/thread_pool.h"
#include "engine/kv_cache.h"
#include "models/model.h"
#include "models/rope.h"
#include "models/weight_binder.h"

namespace mx {

// What one forward pass shares across layers. pos[t] and seq[t] give each
// batch token's position and sequence index.
struct ForwardCtx {
  const Batch& batch;
  KVPool& kv;
  Arena& arena;
  ThreadPool& pool;
  int n_tokens;
  const int32_t* pos;
  const int32_t* seq;
  int max_ctx;  // longest context any token of the batch attends to

  // Cache slot of batch token t: block id and slot within it.
  std::pair<int, int> slot(int t) const {
    const int bs = kv.block_size();
    return {batch.seqs[seq[t]].kv->blocks[pos[t] / bs], pos[t] % bs};
  }
};

// Weight dtypes a dense projection may be stored in.
#define MX_FLOAT_WEIGHTS {DType::F32, DType::BF16}

class Attention {
 public:
  virtual ~Attention() = default;
  // x: [T, hidden] normalised input; out: [T, hidden]. Reads and writes layer
  // kv_layer of the cache for every batch token.
  virtual void forward(ForwardCtx& ctx, int kv_layer, const float* x, float* out) const = 0;
  // Arena bytes forward() takes for T tokens attending to at most max_ctx positions.
  virtual size_t scratch_bytes(int T, int max_ctx, int n_workers) const = 0;
  virtual size_t bytes_per_token() const = 0;  // weight bytes one token reads
};

class FeedForward {
 public:
  virtual ~FeedForward() = default;
  virtual void forward(ForwardCtx& ctx, const float* x, float* out) const = 0;
  virtual size_t scratch_bytes(int T) const = 0;
  // Weight bytes one token reads through this block (all of it for dense,
  // the selected experts for MoE): the decode roofline's numerator.
  virtual size_t bytes_per_token() const = 0;
};

// Multi-head attention with grouped K/V heads (GQA; MHA when kv_heads == heads),
// optional q/k/v bias, optional per-head q/k RMSNorm before RoPE, RoPE on the
// first rotary_dim dims of each head (partial rotary, GLM-4.5).
class GqaAttention final : public Attention {
 public:
  // prefix: e.g. "model.layers.3.self_attn"
  GqaAttention(WeightBinder& wb, const std::string& prefix, const ModelConfig& c);
  void forward(ForwardCtx& ctx, int kv_layer, const float* x, float* out) const override;
  size_t scratch_bytes(int T, int max_ctx, int n_workers) const override;
  size_t bytes_per_token() const override;

  // The bound weights and shape, for executors other than forward() (the
  // backend decoder, models/backend_decoder.h).
  struct View {
    const Tensor &wq, &wk, &wv, &wo, &bq, &bk, &bv, &q_norm, &k_norm;
    const Rope& rope;
    int n_heads, n_kv_heads, head_dim;
    float norm_eps, scale;
  };
  View view() const {
    return {wq_, wk_, wv_, wo_, bq_, bk_, bv_, q_norm_, k_norm_, rope_, n_heads_, n_kv_heads_, head_dim_, norm_eps_, scale_};
  }

 private:
  int dim_, n_heads_, n_kv_heads_, head_dim_;  // heads of this rank under tensor parallel
  float norm_eps_, scale_;
  Tensor wq_, wk_, wv_, wo_, bq_, bk_, bv_, q_norm_, k_norm_;
  Rope rope_;
  OwnedTensor wo_own_;  // tensor parallel: this rank's o_proj columns
  Buffer wo_scales_;
};

// down(silu(gate(x)) * up(x)). With split_size > 1 (tensor parallel) this rank
// holds hidden units [split_rank * hidden / split_size, ...): gate/up rows and
// down columns, and its output is a partial sum the caller allreduces.
class SwigluMlp final : public FeedForward {
 public:
  SwigluMlp(WeightBinder& wb, const std::string& prefix, int dim, int hidden, int split_rank = 0,
            int split_size = 1);
  void forward(ForwardCtx& ctx, const float* x, float* out) const override {
    forward_rows(ctx, x, out, ctx.n_tokens);
  }
  // scratch: 2 * rows * hidden() floats, or null to take it from the arena (which
  // only the thread that owns the forward may do).
  void forward_rows(ForwardCtx& ctx, const float* x, float* out, int rows, float* scratch = nullptr) const;
  size_t scratch_bytes(int T) const override { return 2 * size_t(T) * hidden_ * 4 + 256; }
  size_t bytes_per_token() const override;
  int hidden() const { return hidden_; }
  const Tensor& gate() const { return gate_; }
  const Tensor& up() const { return up_; }
  const Tensor& down() const { return down_; }

 private:
  int dim_, hidden_;
  Tensor gate_, up_, down_;
  OwnedTensor down_own_;
  Buffer down_scales_;
};

// Normalisation weight of length dim.
Tensor bind_norm(WeightBinder& wb, const std::string& name, int dim);

// Causal attention of every batch token over its sequence's paged cache:
// out[t, h] = sum_j softmax_j(scale * q[t, h] . K[j, h / group]) V[j, h / group]
// for j <= pos[t]. q: [T, n_heads, qk_dim]; out: [T, n_heads, v_dim]. Keys of
// kv head g sit at offset g * qk_dim of each token's K slot (k_width floats);
// values at g * v_dim of the V slot, or, when values_in_k (MLA's latent
// cache: V is the first v_dim floats of K), of the K slot itself.
struct PagedAttnShape {
  int n_heads, group, qk_dim, v_dim;
  bool values_in_k = false;
  float scale;
};
void paged_attention(ForwardCtx& ctx, int kv_layer, const PagedAttnShape& s, const float* q,
                     float* out);
size_t paged_attention_scratch(int max_ctx, int n_workers);

}  // namespace mx
