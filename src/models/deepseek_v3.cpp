// DeepSeek-V3 family: DeepseekV3ForCausalLM (transformers models/deepseek_v3,
// vLLM deepseek_v2.py / deepseek_mtp.py; docs/architectures.md 2).
//   attention: MLA (models/mla.h): self_attn.{q_a_proj, q_a_layernorm, q_b_proj | q_proj,
//     kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj}; interleaved RoPE on the
//     qk_rope_head_dim slice; yarn rope_scaling with the mscale^2 softmax factor;
//     the cache holds kv_lora_rank + qk_rope_head_dim floats per token
//   MoE and MTP exactly as GLM-4.5 (models/glm4_moe.cpp), with n_group/topk_group
//     grouping active (8 groups, best 4 in V3)
#include "models/decoder.h"
#include "models/families.h"

namespace mx {

std::unique_ptr<Model> build_deepseek_v3(const ModelConfig& c, Store store, const LoadOptions& opts) {
  return build_decoder(c, std::move(store), opts);
}

}  // namespace mx
