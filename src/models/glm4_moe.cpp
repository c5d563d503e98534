// GLM-4.5 family: Glm4MoeForCausalLM (transformers models/glm4_moe, vLLM
// glm4_moe.py / glm4_moe_mtp.py, sglang glm4_moe_nextn.py; docs/architectures.md 1).
//   attention: GQA, q/k/v bias (attention_bias), optional per-head q/k norm
//     (use_qk_norm), RoPE rotate_half on the first head_dim * partial_rotary_factor dims
//   layers < first_k_dense_replace: dense mlp.{gate,up,down}_proj
//   other layers: mlp.gate.weight [E, H] + mlp.gate.e_score_correction_bias [E],
//     sigmoid grouped top-k router, mlp.experts.{e}.{gate,up,down}_proj,
//     mlp.shared_experts.{gate,up,down}_proj (moe_intermediate_size * n_shared_experts)
//   MTP: model.layers.{num_hidden_layers}.{enorm, hnorm, eh_proj [H, 2H],
//     shared_head.norm, shared_head.head?, embed_tokens?} + a full MoE decoder layer
#include "models/decoder.h"
#include "models/families.h"

namespace mx {

std::unique_ptr<Model> build_glm4_moe(const ModelConfig& c, Store store, const LoadOptions& opts) {
  return build_decoder(c, std::move(store), opts);
}

}  // namespace mx
