#pragma once
// What the roofline model needs to know about a model, derived from its
// config.json: parameter counts by role, KV bytes per token, attention FLOPs
// per context position.
#include "formats/model_config.h"

namespace mx::plan {

struct ModelShape {
  int layers = 0, hidden = 0, vocab = 0;
  double attn_params = 0;       // all layers' attention projections
  double dense_ffn_params = 0;  // dense layers' MLPs + shared experts + routers (active for every token)
  double expert_params = 0;     // one routed expert (gate, up, down)
  int moe_layers = 0, experts = 0, top_k = 0;
  double embed_params = 0, lm_head_params = 0;  // lm_head 0 extra bytes when tied (same tensor)
  bool tied_embeddings = false;
  double kv_bytes_per_token = 0;  // all layers, bf16 cache
  bool kv_split_by_tp = true;     // GQA heads split across TP ranks; MLA's latent is replicated
  // Attention FLOPs per new token per earlier position (all layers): QK^T + AV.
  double attn_flops_per_pos_prefill = 0, attn_flops_per_pos_decode = 0;
  int dense_width = 0, expert_width = 0;  // FFN intermediate widths (for GEMM efficiency)

  double total_params() const;   // stored: embeddings + lm_head (if untied) + layers
  double active_params() const;  // per token, excluding the embedding gather and lm_head
};

// From a parsed config (MTP layers are not counted: they are not run by plain decoding).
ModelShape model_shape(const ModelConfig& c);

}  // namespace mx::plan
