#pragma once
// Multi-head latent attention (DeepSeek-V2/V3), run in the "absorbed" form that
// vLLM and sglang decode with (docs/architectures.md 2.3-2.7): the cache holds,
// per token, only the normalised latent c (kv_lora_rank) and the rotated shared
// rope key k_pe (qk_rope_head_dim), not expanded per-head K/V.
//   q        = q_b(norm(q_a(x)))  (or q_proj(x)), per head [nope P | rope R]
//   [c|k_pe] = kv_a_proj_with_mqa(x);  c = kv_a_layernorm(c)
//   q_lat[h] = W_UK[h]^T q_nope[h]           (W_UK[h]: kv_b rows of head h's K part)
//   score    = (q_lat . c + rope(q_pe) . rope(k_pe)) * softmax_scale
//   o[h]     = W_UV[h] (sum_j p_j c_j);  out = o_proj(o)
// which is exactly the naive form with K/V expanded through kv_b_proj.
// Tensor parallel: a rank holds its heads' rows of q_b/q_proj and kv_b_proj and
// their o_proj columns; the latent cache is per token, not per head, so every
// rank keeps all of it (as vLLM's MLA does) and only the heads are divided.
#include "models/blocks.h"

namespace mx {

class MlaAttention final : public Attention {
 public:
  MlaAttention(WeightBinder& wb, const std::string& prefix, const ModelConfig& c);
  void place(DeviceWeights& dw) override;
  void forward(ForwardCtx& ctx, int kv_layer, const float* x, float* out) const override;
  size_t scratch_bytes(int T) const override;
  size_t bytes_per_token() const override;

 private:
  int dim_, n_heads_, P_, R_, Vd_, Lkv_, q_rank_;
  float eps_, scale_;
  Tensor q_a_, q_a_norm_, q_b_, q_proj_, kv_a_, kv_a_norm_, kv_b_;
  Tensor kv_b_read_;  // this rank's kv_b_proj rows as bound (LoadStats: read on the host here)
  WeightSlice o_proj_;  // tensor parallel: this rank's o_proj columns
  OwnedTensor kv_b_plain_;            // dequantized kv_b_proj when stored quantized
  std::vector<OwnedTensor> w_uk_t_;  // per head [Lkv, P]: W_UK transposed, for q absorption
  std::vector<Tensor> w_uv_;         // per head [Vd, Lkv]: views into kv_b_proj
  Rope rope_;
  struct {
    DevWeight q_a, q_b, q_proj, kv_a, o_proj;
    const float *q_a_norm = nullptr, *kv_a_norm = nullptr;
    std::vector<DevWeight> w_uk_t, w_uv;
    RopeArgs rope;
  } d_;
};

}  // namespace mx
