// Qwen3-MoE family: Qwen3MoeForCausalLM (transformers models/qwen3_moe;
// docs/architectures.md 3).
//   attention: as Qwen3 (GQA, per-head q/k RMSNorm before rotate_half RoPE)
//   layer i is MoE iff i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0:
//     mlp.gate.weight [E, H] (softmax router in fp32, top-k, renormalised iff
//     norm_topk_prob), mlp.experts.{e}.{gate,up,down}_proj; no shared experts
//   other layers: dense mlp.{gate,up,down}_proj of intermediate_size
#include "models/decoder.h"
#include "models/families.h"

namespace mx {

std::unique_ptr<Model> build_qwen3_moe(const ModelConfig& c, Store store, const LoadOptions& opts) {
  return build_decoder(c, std::move(store), opts);
}

}  // namespace mx
