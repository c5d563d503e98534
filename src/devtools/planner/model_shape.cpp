#include "devtools/planner/model_shape.h"

namespace mx::plan {

double ModelShape::total_params() const {
  return embed_params + (tied_embeddings ? 0 : lm_head_params) + attn_params + dense_ffn_params +
         double(moe_layers) * experts * expert_params;
}

double ModelShape::active_params() const {
  return attn_params + dense_ffn_params + double(moe_layers) * top_k * expert_params;
}

ModelShape model_shape(const ModelConfig& c) {
  ModelShape s;
  const double h = c.hidden_size;
  s.layers = c.num_hidden_layers;
  s.hidden = c.hidden_size;
  s.vocab = c.vocab_size;
  s.embed_params = double(c.vocab_size) * h;
  s.lm_head_params = double(c.vocab_size) * h;
  s.tied_embeddings = c.tie_word_embeddings;
  const double heads = c.num_attention_heads;
  double attn = 0, kv = 0, qk_pre = 0, v_pre = 0, qk_dec = 0, v_dec = 0;
  if (c.mla) {
    const MlaConfig& m = c.mla_cfg;
    const double qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
    attn = (m.q_lora_rank > 0 ? h * m.q_lora_rank + m.q_lora_rank * heads * qk : h * heads * qk) +
           h * (m.kv_lora_rank + m.qk_rope_head_dim) + double(m.kv_lora_rank) * heads * (m.qk_nope_head_dim + m.v_head_dim) +
           heads * m.v_head_dim * h;
    kv = 2.0 * (m.kv_lora_rank + m.qk_rope_head_dim);
    s.kv_split_by_tp = false;
    qk_pre = heads * qk;  // prefill: decompressed K/V (what serving engines run)
    v_pre = heads * m.v_head_dim;
    qk_dec = heads * (m.kv_lora_rank + m.qk_rope_head_dim);  // decode: the absorbed form over the latent
    v_dec = heads * m.kv_lora_rank;
  } else {
    attn = 2.0 * h * c.q_dim() + 2.0 * h * c.kv_dim();
    kv = 2.0 * 2.0 * c.kv_dim();
    qk_pre = qk_dec = c.q_dim();
    v_pre = v_dec = c.q_dim();
  }
  s.attn_params = attn * s.layers;
  s.kv_bytes_per_token = kv * s.layers;
  s.attn_flops_per_pos_prefill = 2.0 * (qk_pre + v_pre) * s.layers;
  s.attn_flops_per_pos_decode = 2.0 * (qk_dec + v_dec) * s.layers;
  s.dense_width = c.intermediate_size;
  const MoeConfig& moe = c.moe;
  s.expert_width = moe.moe_intermediate_size;
  for (int l = 0; l < s.layers; ++l) {
    if (moe.n_routed_experts > 0 && c.is_moe_layer(l)) {
      ++s.moe_layers;
      s.dense_ffn_params += 3.0 * h * moe.moe_intermediate_size * moe.n_shared_experts + h * moe.n_routed_experts;
    } else {
      s.dense_ffn_params += 3.0 * h * c.intermediate_size;
    }
  }
  s.experts = moe.n_routed_experts;
  s.top_k = moe.num_experts_per_tok;
  s.expert_params = 3.0 * h * moe.moe_intermediate_size;
  return s;
}

}  // namespace mx::plan
