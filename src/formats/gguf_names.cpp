#include "formats/gguf_names.h"

#include <cctype>
#include <cstdlib>
#include <regex>

#include "core/error.h"

namespace mx::gguf_names {

namespace {
struct ArchPair {
  Arch arch;
  const char* gguf;
};
// llama.cpp LLM_ARCH_NAMES (src/llama-arch.cpp).
constexpr ArchPair kArchs[] = {{Arch::Llama, "llama"},       {Arch::Qwen2, "qwen2"},
                               {Arch::Qwen3, "qwen3"},       {Arch::Qwen3Moe, "qwen3moe"},
                               {Arch::Glm4Moe, "glm4moe"},   {Arch::DeepseekV3, "deepseek2"}};

struct NamePair {
  const char* hf;    // after "model.layers.{i}."
  const char* gguf;  // after "blk.{i}."
};
// llama.cpp LLM_TENSOR_NAMES + gguf-py tensor_mapping.py.
constexpr NamePair kLayer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
    {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
    {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
    {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
    {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
    {"self_attn.kv_b_proj.weight", "attn_kv_b.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
    {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
    // MTP ("nextn") layers, blk.{num_hidden_layers + i} (GLM-4.5, DeepSeek-V3).
    {"enorm.weight", "nextn.enorm.weight"},
    {"hnorm.weight", "nextn.hnorm.weight"},
    {"eh_proj.weight", "nextn.eh_proj.weight"},
    {"shared_head.norm.weight", "nextn.shared_head_norm.weight"},
    {"shared_head.head.weight", "nextn.shared_head_head.weight"},
    {"embed_tokens.weight", "nextn.embed_tokens.weight"},
};
constexpr NamePair kGlobal[] = {{"model.embed_tokens.weight", "token_embd.weight"},
                                {"model.norm.weight", "output_norm.weight"},
                                {"lm_head.weight", "output.weight"}};

// GLM-4.5's post_attention_layernorm is llama.cpp's ATTN_POST_NORM; every other
// family's is FFN_NORM (gguf-py constants.py MODEL_TENSORS per arch).
const char* post_attn_norm(Arch a) {
  return a == Arch::Glm4Moe ? "post_attention_norm.weight" : "ffn_norm.weight";
}

bool split_layer(const std::string& name, const std::string& prefix, int& layer, std::string& rest) {
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  size_t i = prefix.size(), j = i;
  while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
  if (j == i || j - i > 6 || j >= name.size() || name[j] != '.') return false;
  layer = std::atoi(name.substr(i, j - i).c_str());
  rest = name.substr(j + 1);
  return true;
}
}  // namespace

const char* arch_to_gguf(Arch a) {
  for (const auto& p : kArchs)
    if (p.arch == a) return p.gguf;
  return "?";
}

std::optional<Arch> arch_from_gguf(const std::string& s) {
  for (const auto& p : kArchs)
    if (s == p.gguf) return p.arch;
  return std::nullopt;
}

std::string supported_archs() {
  std::string r;
  for (const auto& p : kArchs) r += std::string(r.empty() ? "" : ", ") + p.gguf;
  return r;
}

std::optional<std::string> to_gguf(const std::string& hf, Arch a) {
  for (const auto& p : kGlobal)
    if (hf == p.hf) return std::string(p.gguf);
  int l;
  std::string rest;
  if (!split_layer(hf, "model.layers.", l, rest)) return std::nullopt;
  const std::string blk = "blk." + std::to_string(l) + ".";
  if (rest == "post_attention_layernorm.weight") return blk + post_attn_norm(a);
  for (const auto& p : kLayer)
    if (rest == p.hf) return blk + p.gguf;
  return std::nullopt;
}

std::optional<std::string> from_gguf(const std::string& g, Arch a) {
  for (const auto& p : kGlobal)
    if (g == p.gguf) return std::string(p.hf);
  int l;
  std::string rest;
  if (!split_layer(g, "blk.", l, rest)) return std::nullopt;
  const std::string layer = "model.layers." + std::to_string(l) + ".";
  if (rest == post_attn_norm(a)) return layer + "post_attention_layernorm.weight";
  for (const auto& p : kLayer)
    if (rest == p.gguf) return layer + p.hf;
  return std::nullopt;
}

int64_t llama_permuted_heads(const std::string& hf, const ModelConfig& c) {
  if (c.arch != Arch::Llama) return 0;
  if (hf.ends_with("self_attn.q_proj.weight") || hf.ends_with("self_attn.q_proj.bias")) return c.num_attention_heads;
  if (hf.ends_with("self_attn.k_proj.weight") || hf.ends_with("self_attn.k_proj.bias")) return c.num_key_value_heads;
  return 0;
}

std::optional<ExpertName> parse_hf_expert(const std::string& hf) {
  static const std::regex re(R"(model\.layers\.(\d{1,6})\.mlp\.experts\.(\d{1,6})\.(gate|up|down)_proj\.weight)");
  std::smatch m;
  if (!std::regex_match(hf, m, re)) return std::nullopt;
  return ExpertName{std::stoi(m[1]), std::stoi(m[2]), m[3]};
}

std::optional<ExpertName> parse_gguf_experts(const std::string& g) {
  static const std::regex re(R"(blk\.(\d{1,6})\.ffn_(gate|up|down)_exps\.weight)");
  std::smatch m;
  if (!std::regex_match(g, m, re)) return std::nullopt;
  return ExpertName{std::stoi(m[1]), -1, m[2]};
}

std::string hf_expert(int layer, int expert, const std::string& proj) {
  return fmt::format("model.layers.{}.mlp.experts.{}.{}_proj.weight", layer, expert, proj);
}

std::string gguf_experts(int layer, const std::string& proj) {
  return fmt::format("blk.{}.ffn_{}_exps.weight", layer, proj);
}

}  // namespace mx::gguf_names
