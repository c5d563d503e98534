#pragma once
// The architecture hyper-parameters every model family shares, read from HF
// config.json (or synthesised by an importer such as llama2.c). Fields a family
// does not use keep their defaults. Parsing never guesses: an unknown
// architecture, a missing required field or an unsupported option (sliding
// window, an unknown rope_scaling type, ...) is an error naming it.
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "quant/quant_config.h"

namespace mx {

enum class Arch { Llama, Qwen2, Qwen3, Glm4Moe, DeepseekV3, Qwen3Moe };

struct RopeScaling {
  std::string type = "default";  // default | linear | llama3 | yarn
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 0;
  // yarn (DeepSeek-V3 and long-context Qwen): transformers _compute_yarn_parameters
  float beta_fast = 32.0f, beta_slow = 1.0f;
  float mscale = 0.0f, mscale_all_dim = 0.0f;  // 0: not given
  float attention_factor = 0.0f;               // 0: not given
};

// Mixture-of-experts feed-forward (GLM-4.5 / DeepSeek-V3 / Qwen3-MoE).
struct MoeConfig {
  int n_routed_experts = 0;      // 0: dense model
  int n_shared_experts = 0;
  int num_experts_per_tok = 0;
  int moe_intermediate_size = 0;
  bool sigmoid_router = false;   // sigmoid + e_score_correction_bias (DeepSeek/GLM); else softmax (Qwen3)
  int n_group = 1, topk_group = 1;
  bool norm_topk_prob = false;
  float routed_scaling_factor = 1.0f;
  int first_k_dense_replace = 0;  // layers < k are dense (DeepSeek/GLM)
  int decoder_sparse_step = 1;    // Qwen3-MoE: layer i is MoE iff (i+1) % step == 0 ...
  std::vector<int> mlp_only_layers;  // ... and i is not listed here
};

// Multi-head latent attention (DeepSeek-V2/V3).
struct MlaConfig {
  int q_lora_rank = 0;  // 0: q_proj directly (no q_a/q_b)
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
};

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string architecture;  // as spelled in config.json, e.g. "LlamaForCausalLM"
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;
  int max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v (and for some families o) projections carry a bias
  bool qk_norm = false;         // per-head RMSNorm of q and k before RoPE (Qwen3)
  float partial_rotary_factor = 1.0f;  // GLM-4.5: RoPE on the first half of each head
  MoeConfig moe;
  bool mla = false;
  MlaConfig mla_cfg;
  int num_nextn_predict_layers = 0;  // MTP layers stored at model.layers.{num_hidden_layers + i}
  QuantConfig quant;                 // quantization_config: which Linears are stored quantized
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;
  std::string torch_dtype;

  bool is_moe_layer(int layer) const;  // MoE or dense feed-forward at this layer index
  int rotary_dim() const;              // dims of each head that RoPE rotates
  int q_dim() const { return num_attention_heads * head_dim; }
  int kv_dim() const { return num_key_value_heads * head_dim; }
  void validate() const;  // consistency checks; throws mx::Error
};

ModelConfig parse_hf_config(const nlohmann::json& j);
// path: a config.json; overrides: "" or a JSON object whose top-level keys
// replace the file's (vLLM's --hf-overrides).
ModelConfig load_hf_config(const std::string& path, const std::string& overrides = "");
const char* arch_name(Arch a);

// Attention softmax scale: 1/sqrt(qk head dim), times yarn's mscale^2 for
// DeepSeek-style yarn (transformers modeling_deepseek_v3.py).
float attention_scale(const ModelConfig& c);
// Factor yarn multiplies cos/sin by (1 for every other rope type).
float rope_attention_factor(const ModelConfig& c);

// RoPE inverse frequencies for `rotary_dim` dims (rotary_dim/2 values), with the
// config's rope_scaling applied (transformers' modeling_rope_utils.py semantics).
std::vector<float> rope_inv_freq(const ModelConfig& c, int rotary_dim);

}  // namespace mx
