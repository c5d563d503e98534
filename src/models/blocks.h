#pragma once
// Building blocks shared by the architecture files: the per-forward context, the
// attention and feed-forward interfaces and their implementations (GQA here,
// MLA in mla.h, MoE in moe.h). Each block binds its own weights by checkpoint
// name, so a family file only says which blocks it stacks under which prefixes;
// once binding succeeded, place() puts them in the backend's memory, and
// forward() runs every op through the Backend (backends/backend.h): one
// definition of the model for the CPU and the GPUs.
#include <string>

#include "backends/backend.h"
#include "models/device_weights.h"
#include "models/kv_cache.h"
#include "models/model.h"
#include "models/rope.h"
#include "models/weight_binder.h"

namespace mx {

// What one forward pass shares across layers. Every pointer is backend memory.
// Token t is at position pos[t] of batch sequence seq[t], whose block table is
// row seq[t] of block_tables ([n_seqs, max_blocks]); its K/V go to cache slot slots[t].
struct ForwardCtx {
  Backend& b;
  DevArena& arena;
  KVPool& kv;
  int n_tokens;
  const int32_t* pos;
  const int32_t* seq;
  const int32_t* slots;
  const int32_t* block_tables;
  int max_blocks;

  PagedKV layer_kv(int layer) const { return kv.layer(layer); }
};

// Weight dtypes a dense projection may be stored in.
#define MX_FLOAT_WEIGHTS {DType::F32, DType::BF16}

class Attention {
 public:
  virtual ~Attention() = default;
  virtual void place(DeviceWeights& dw) = 0;
  // x: [T, hidden] normalised input; out: [T, hidden]. Reads and writes layer
  // kv_layer of the cache for every batch token.
  virtual void forward(ForwardCtx& ctx, int kv_layer, const float* x, float* out) const = 0;
  // Arena bytes forward() takes for T tokens.
  virtual size_t scratch_bytes(int T) const = 0;
  virtual size_t bytes_per_token() const = 0;  // weight bytes one token reads
};

class FeedForward {
 public:
  virtual ~FeedForward() = default;
  virtual void place(DeviceWeights& dw) = 0;
  virtual void forward(ForwardCtx& ctx, const float* x, float* out) const = 0;
  virtual size_t scratch_bytes(int T) const = 0;
  // Weight bytes one token reads through this block (all of it for dense,
  // the selected experts for MoE): the decode roofline's numerator.
  virtual size_t bytes_per_token() const = 0;
};

// Rotary embedding arguments of a Rope on the backend (inv_freq placed there).
RopeArgs place_rope(DeviceWeights& dw, const Rope& r);

// Multi-head attention with grouped K/V heads (GQA; MHA when kv_heads == heads),
// optional q/k/v bias, optional per-head q/k RMSNorm before RoPE, RoPE on the
// first rotary_dim dims of each head (partial rotary, GLM-4.5).
class GqaAttention final : public Attention {
 public:
  // prefix: e.g. "model.layers.3.self_attn"
  GqaAttention(WeightBinder& wb, const std::string& prefix, const ModelConfig& c);
  void place(DeviceWeights& dw) override;
  void forward(ForwardCtx& ctx, int kv_layer, const float* x, float* out) const override;
  size_t scratch_bytes(int T) const override;
  size_t bytes_per_token() const override;

 private:
  int dim_, n_heads_, n_kv_heads_, head_dim_;  // heads of this rank under tensor parallel
  float norm_eps_, scale_;
  Tensor wq_, wk_, wv_, bq_, bk_, bv_, q_norm_, k_norm_;
  WeightSlice wo_;  // tensor parallel: this rank's o_proj columns
  Rope rope_;
  struct {
    DevWeight wq, wk, wv, wo;
    const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *q_norm = nullptr, *k_norm = nullptr;
    RopeArgs rope;
  } d_;
};

// down(silu(gate(x)) * up(x)). With split_size > 1 (tensor parallel) this rank
// holds hidden units [split_rank * hidden / split_size, ...): gate/up rows and
// down columns, and its output is a partial sum the caller allreduces.
class SwigluMlp final : public FeedForward {
 public:
  SwigluMlp(WeightBinder& wb, const std::string& prefix, int dim, int hidden, int split_rank = 0,
            int split_size = 1);
  void place(DeviceWeights& dw) override;
  void forward(ForwardCtx& ctx, const float* x, float* out) const override;
  size_t scratch_bytes(int T) const override { return 2 * size_t(T) * hidden_ * 4 + 512; }
  size_t bytes_per_token() const override;
  int hidden() const { return hidden_; }
  const Tensor& gate() const { return gate_; }
  const Tensor& up() const { return up_; }
  const WeightSlice& down() const { return down_; }
  // The placed weights (MoE experts and shared experts hand them to moe_ffn).
  const DevWeight& d_gate() const { return d_gate_; }
  const DevWeight& d_up() const { return d_up_; }
  const DevWeight& d_down() const { return d_down_; }

 private:
  int hidden_;
  Tensor gate_, up_;
  WeightSlice down_;  // tensor parallel: this rank's columns
  DevWeight d_gate_, d_up_, d_down_;
};

// Normalisation weight of length dim.
Tensor bind_norm(WeightBinder& wb, const std::string& name, int dim);

}  // namespace mx
