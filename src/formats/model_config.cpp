#include "formats/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"

using json = nlohmann::json;

namespace mx {

namespace {

struct ArchName {
  const char* hf;
  Arch arch;
};
constexpr ArchName kArchs[] = {
    {"LlamaForCausalLM", Arch::Llama},
    {"Qwen2ForCausalLM", Arch::Qwen2},
    {"Qwen3ForCausalLM", Arch::Qwen3},
    {"Glm4MoeForCausalLM", Arch::Glm4Moe},
    {"DeepseekV3ForCausalLM", Arch::DeepseekV3},
    {"Qwen3MoeForCausalLM", Arch::Qwen3Moe},
};

// The sigmoid-router MoE fields shared by GLM-4.5 and DeepSeek-V3 (and their
// MTP layers); defaults differ per family's transformers config class.
struct SigmoidMoeDefaults {
  int n_group, topk_group;
  float routed_scaling_factor;
  int first_k_dense_replace;
};
void parse_sigmoid_moe(const JsonFields& f, ModelConfig& c, const SigmoidMoeDefaults& d) {
  MoeConfig& m = c.moe;
  m.n_routed_experts = f.req_int("n_routed_experts");
  m.n_shared_experts = f.opt_int("n_shared_experts", 1);
  m.num_experts_per_tok = f.req_int("num_experts_per_tok");
  m.moe_intermediate_size = f.req_int("moe_intermediate_size");
  m.sigmoid_router = true;
  m.n_group = f.opt_int("n_group", d.n_group);
  m.topk_group = f.opt_int("topk_group", d.topk_group);
  m.norm_topk_prob = f.opt_bool("norm_topk_prob", true);
  m.routed_scaling_factor = f.opt_float("routed_scaling_factor", d.routed_scaling_factor);
  m.first_k_dense_replace = f.opt_int("first_k_dense_replace", d.first_k_dense_replace);
  c.num_nextn_predict_layers = f.opt_int("num_nextn_predict_layers", 0);
}

}  // namespace

const char* arch_name(Arch a) {
  for (const auto& n : kArchs)
    if (n.arch == a) return n.hf;
  return "?";
}

ModelConfig parse_hf_config(const json& j) {
  if (!j.is_object()) fail("config.json: top level is not an object");
  ModelConfig c;
  if (!j.contains("architectures") || !j["architectures"].is_array() ||
      j["architectures"].size() != 1 || !j["architectures"][0].is_string())
    fail("config.json: 'architectures' must list exactly one architecture name");
  c.architecture = j["architectures"][0].get<std::string>();
  bool known = false;
  for (const auto& n : kArchs)
    if (c.architecture == n.hf) c.arch = n.arch, known = true;
  if (!known) {
    std::string list;
    for (const auto& n : kArchs) list += std::string(list.empty() ? "" : ", ") + n.hf;
    fail("config.json: architecture '{}' is not supported (supported: {})", c.architecture, list);
  }
  JsonFields f(j, "config.json");
  c.hidden_size = f.req_int("hidden_size");
  c.intermediate_size = f.req_int("intermediate_size");
  c.num_hidden_layers = f.req_int("num_hidden_layers");
  c.num_attention_heads = f.req_int("num_attention_heads");
  c.num_key_value_heads = f.opt_int("num_key_value_heads", c.num_attention_heads);
  c.vocab_size = f.req_int("vocab_size");
  c.max_position_embeddings = f.opt_int("max_position_embeddings", 2048);
  MX_CHECK(c.num_attention_heads > 0, "config.json: num_attention_heads must be positive");
  c.head_dim = f.opt_int("head_dim", c.hidden_size / c.num_attention_heads);
  c.rms_norm_eps = f.opt_float("rms_norm_eps", 1e-6f);
  c.rope_theta = f.opt_float("rope_theta", 10000.0f);
  c.tie_word_embeddings = f.opt_bool("tie_word_embeddings", false);
  c.bos_token_id = f.opt_int("bos_token_id", -1);
  if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
    const json& e = j["eos_token_id"];
    // Read whole, so an id past int is an error (validate) rather than cut down to another token.
    auto id = [](const json& v) {
      const int64_t x = v.get<int64_t>();
      MX_CHECK(x >= 0 && x <= INT32_MAX, "config.json: eos_token_id {} is not a token id", x);
      return int(x);
    };
    if (e.is_number_integer()) {
      c.eos_token_ids.push_back(id(e));
    } else if (e.is_array()) {
      for (const auto& v : e) {
        MX_CHECK(v.is_number_integer(), "config.json: eos_token_id entries must be integers");
        c.eos_token_ids.push_back(id(v));
      }
    } else {
      fail("config.json: eos_token_id must be an integer or a list of integers");
    }
  }
  if (j.contains("torch_dtype") && j["torch_dtype"].is_string())
    c.torch_dtype = j["torch_dtype"].get<std::string>();

  std::string act = f.opt_str("hidden_act", "silu");
  MX_CHECK(act == "silu", "config.json: hidden_act '{}' is not supported (only silu)", act);

  MoeConfig& m = c.moe;
  switch (c.arch) {
    case Arch::Llama:
      c.attention_bias = f.opt_bool("attention_bias", false);
      MX_CHECK(!f.opt_bool("mlp_bias", false), "config.json: mlp_bias=true is not supported");
      break;
    case Arch::Qwen2:
      // Qwen2 always has q/k/v biases (and none on o_proj); config.json does not say so.
      c.attention_bias = true;
      MX_CHECK(!f.opt_bool("use_sliding_window", false),
               "config.json: use_sliding_window=true is not supported");
      break;
    case Arch::Qwen3:
      c.attention_bias = f.opt_bool("attention_bias", false);
      c.qk_norm = true;
      MX_CHECK(!f.opt_bool("use_sliding_window", false),
               "config.json: use_sliding_window=true is not supported");
      break;
    case Arch::Glm4Moe:
      // transformers configuration_glm4_moe.py defaults where a field is absent.
      c.attention_bias = f.opt_bool("attention_bias", false);
      c.qk_norm = f.opt_bool("use_qk_norm", false);
      c.partial_rotary_factor = f.opt_float("partial_rotary_factor", 0.5f);
      parse_sigmoid_moe(f, c, {1, 1, 1.0f, 1});
      break;
    case Arch::DeepseekV3: {
      // transformers configuration_deepseek_v3.py / modeling_deepseek_v3.py.
      c.mla = true;
      MlaConfig& a = c.mla_cfg;
      a.q_lora_rank = f.opt_int("q_lora_rank", 0);
      a.kv_lora_rank = f.req_int("kv_lora_rank");
      a.qk_nope_head_dim = f.req_int("qk_nope_head_dim");
      a.qk_rope_head_dim = f.req_int("qk_rope_head_dim");
      a.v_head_dim = f.req_int("v_head_dim");
      c.head_dim = a.qk_rope_head_dim;  // as transformers sets it: RoPE sizing only
      MX_CHECK(!f.opt_bool("attention_bias", false),
               "config.json: attention_bias=true is not supported for DeepseekV3");
      MX_CHECK(f.opt_bool("rope_interleave", true),
               "config.json: rope_interleave=false is not supported for DeepseekV3");
      std::string scoring = f.opt_str("scoring_func", "sigmoid");
      MX_CHECK(scoring == "sigmoid", "config.json: scoring_func '{}' is not supported (sigmoid)", scoring);
      std::string topk = f.opt_str("topk_method", "noaux_tc");
      MX_CHECK(topk == "noaux_tc", "config.json: topk_method '{}' is not supported (noaux_tc)", topk);
      MX_CHECK(f.opt_int("moe_layer_freq", 1) == 1, "config.json: moe_layer_freq != 1 is not supported");
      parse_sigmoid_moe(f, c, {8, 4, 2.5f, 3});
      break;
    }
    case Arch::Qwen3Moe:
      // transformers configuration_qwen3_moe.py.
      c.attention_bias = f.opt_bool("attention_bias", false);
      c.qk_norm = true;
      MX_CHECK(!f.opt_bool("use_sliding_window", false),
               "config.json: use_sliding_window=true is not supported");
      m.n_routed_experts = f.req_int("num_experts");
      m.num_experts_per_tok = f.req_int("num_experts_per_tok");
      m.moe_intermediate_size = f.req_int("moe_intermediate_size");
      m.norm_topk_prob = f.opt_bool("norm_topk_prob", false);
      m.decoder_sparse_step = f.opt_int("decoder_sparse_step", 1);
      m.mlp_only_layers = f.opt_int_list("mlp_only_layers");
      break;
  }

  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const json& r = j["rope_scaling"];
    MX_CHECK(r.is_object(), "config.json: rope_scaling must be an object or null");
    JsonFields rf(r, "config.json: rope_scaling");
    std::string type = rf.opt_str("rope_type", rf.opt_str("type", "default"));
    RopeScaling& s = c.rope_scaling;
    s.type = type;
    if (type == "default") {
    } else if (type == "linear") {
      s.factor = rf.opt_float("factor", 1.0f);
    } else if (type == "llama3") {
      s.factor = rf.opt_float("factor", 8.0f);
      s.low_freq_factor = rf.opt_float("low_freq_factor", 1.0f);
      s.high_freq_factor = rf.opt_float("high_freq_factor", 4.0f);
      s.original_max_position_embeddings = rf.req_int("original_max_position_embeddings");
    } else if (type == "yarn" || type == "deepseek_yarn") {
      s.type = "yarn";
      s.factor = rf.opt_float("factor", 1.0f);
      s.original_max_position_embeddings = rf.req_int("original_max_position_embeddings");
      s.beta_fast = rf.opt_float("beta_fast", 32.0f);
      s.beta_slow = rf.opt_float("beta_slow", 1.0f);
      s.mscale = rf.opt_float("mscale", 0.0f);
      s.mscale_all_dim = rf.opt_float("mscale_all_dim", 0.0f);
      s.attention_factor = rf.opt_float("attention_factor", 0.0f);
      MX_CHECK(!r.contains("truncate") || r["truncate"].is_null() || r["truncate"] == true,
               "config.json: rope_scaling.truncate=false is not supported");
    } else {
      fail("config.json: rope_scaling type '{}' is not supported (default, linear, llama3, yarn)",
           type);
    }
  }
  c.quant = parse_quant_config(j);
  c.validate();
  return c;
}

void ModelConfig::validate() const {
  auto pos = [](int v, const char* n) { MX_CHECK(v > 0, "config: {} must be positive, got {}", n, v); };
  pos(hidden_size, "hidden_size");
  pos(intermediate_size, "intermediate_size");
  pos(num_hidden_layers, "num_hidden_layers");
  pos(num_attention_heads, "num_attention_heads");
  pos(num_key_value_heads, "num_key_value_heads");
  pos(head_dim, "head_dim");
  pos(vocab_size, "vocab_size");
  pos(max_position_embeddings, "max_position_embeddings");
  // Upper bounds far above every released model (DeepSeek-V3: 61 layers, hidden
  // 7168, 256 experts; Llama 3.1 405B: 126 layers, hidden 16384; the largest
  // vocabularies ~260k; contexts up to 10M), checked before anything is
  // allocated from them: an absurd config is a clear error, not gigabytes of
  // bookkeeping or a bare std::bad_alloc.
  auto at_most = [](int64_t v, int64_t cap, const char* n) {
    MX_CHECK(v <= cap, "config: {} = {} is larger than mxserve supports ({} at most)", n, v, cap);
  };
  at_most(num_hidden_layers, 1024, "num_hidden_layers");
  at_most(hidden_size, 1 << 17, "hidden_size");
  at_most(intermediate_size, 1 << 20, "intermediate_size");
  at_most(num_attention_heads, 4096, "num_attention_heads");
  at_most(head_dim, 4096, "head_dim");
  at_most(vocab_size, 1 << 23, "vocab_size");
  at_most(max_position_embeddings, 1 << 24, "max_position_embeddings");
  at_most(int64_t(num_attention_heads) * head_dim, 1 << 18, "num_attention_heads * head_dim");
  at_most(moe.n_routed_experts, 1024, "the number of routed experts");
  at_most(moe.moe_intermediate_size, 1 << 20, "moe_intermediate_size");
  at_most(moe.n_shared_experts, 64, "n_shared_experts");
  for (int e : eos_token_ids)
    MX_CHECK(e >= 0 && e < vocab_size, "config: eos_token_id {} is not a token of the {}-token vocabulary", e,
             vocab_size);
  MX_CHECK(bos_token_id >= -1 && bos_token_id < vocab_size,
           "config: bos_token_id {} is not a token of the {}-token vocabulary", bos_token_id, vocab_size);
  MX_CHECK(num_attention_heads % num_key_value_heads == 0,
           "config: num_attention_heads {} is not a multiple of num_key_value_heads {}",
           num_attention_heads, num_key_value_heads);
  MX_CHECK(head_dim % 2 == 0, "config: head_dim {} must be even for RoPE", head_dim);
  MX_CHECK(rms_norm_eps > 0 && std::isfinite(rms_norm_eps), "config: rms_norm_eps must be positive");
  MX_CHECK(rope_theta > 0 && std::isfinite(rope_theta), "config: rope_theta must be positive");
  MX_CHECK(rope_scaling.factor > 0, "config: rope_scaling.factor must be positive");
  MX_CHECK(partial_rotary_factor > 0 && partial_rotary_factor <= 1,
           "config: partial_rotary_factor must be in (0, 1]");
  MX_CHECK(rotary_dim() % 2 == 0 && rotary_dim() > 0, "config: rotary dim {} must be even",
           rotary_dim());
  MX_CHECK(num_nextn_predict_layers >= 0 && num_nextn_predict_layers <= 8,
           "config: num_nextn_predict_layers {} out of range", num_nextn_predict_layers);
  if (moe.n_routed_experts > 0) {
    const MoeConfig& m = moe;
    MX_CHECK(m.num_experts_per_tok > 0 && m.num_experts_per_tok <= m.n_routed_experts,
             "config: num_experts_per_tok {} must be in [1, {}]", m.num_experts_per_tok,
             m.n_routed_experts);
    MX_CHECK(m.moe_intermediate_size > 0, "config: moe_intermediate_size must be positive");
    MX_CHECK(m.n_group > 0 && m.n_routed_experts % m.n_group == 0,
             "config: n_routed_experts {} is not a multiple of n_group {}", m.n_routed_experts,
             m.n_group);
    MX_CHECK(m.topk_group > 0 && m.topk_group <= m.n_group, "config: topk_group {} must be in [1, {}]",
             m.topk_group, m.n_group);
    MX_CHECK(m.num_experts_per_tok <= m.topk_group * (m.n_routed_experts / m.n_group),
             "config: num_experts_per_tok {} exceeds the experts of topk_group groups",
             m.num_experts_per_tok);
    MX_CHECK(m.decoder_sparse_step > 0, "config: decoder_sparse_step must be positive");
    MX_CHECK(m.n_shared_experts >= 0, "config: n_shared_experts must be non-negative");
  }
  if (mla) {
    const MlaConfig& a = mla_cfg;
    MX_CHECK(a.kv_lora_rank > 0 && a.qk_nope_head_dim > 0 && a.qk_rope_head_dim > 0 && a.v_head_dim > 0,
             "config: MLA dims must be positive");
    MX_CHECK(a.kv_lora_rank <= (1 << 14) && a.q_lora_rank <= (1 << 16) && a.qk_nope_head_dim <= 4096 &&
                 a.qk_rope_head_dim <= 4096 && a.v_head_dim <= 4096,
             "config: MLA dims (kv_lora_rank {}, q_lora_rank {}, head dims {}/{}/{}) are larger than mxserve supports",
             a.kv_lora_rank, a.q_lora_rank, a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim);
  }
}

bool ModelConfig::is_moe_layer(int layer) const {
  if (moe.n_routed_experts == 0) return false;
  if (arch == Arch::Qwen3Moe) {
    for (int l : moe.mlp_only_layers)
      if (l == layer) return false;
    return (layer + 1) % moe.decoder_sparse_step == 0;
  }
  return layer >= moe.first_k_dense_replace;
}

int ModelConfig::rotary_dim() const {
  if (mla) return mla_cfg.qk_rope_head_dim;
  return int(head_dim * partial_rotary_factor);
}

namespace {
// transformers get_mscale / yarn_get_mscale
double yarn_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }
}  // namespace

float attention_scale(const ModelConfig& c) {
  const int qk = c.mla ? c.mla_cfg.qk_nope_head_dim + c.mla_cfg.qk_rope_head_dim : c.head_dim;
  double s = 1.0 / std::sqrt(double(qk));
  // modeling_deepseek_v3.py: with yarn and mscale_all_dim, softmax scale *= mscale^2.
  if (c.mla && c.rope_scaling.type == "yarn" && c.rope_scaling.mscale_all_dim != 0) {
    double m = yarn_mscale(c.rope_scaling.factor, c.rope_scaling.mscale_all_dim);
    s *= m * m;
  }
  return float(s);
}

float rope_attention_factor(const ModelConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  if (s.type != "yarn") return 1.0f;
  if (s.attention_factor != 0) return s.attention_factor;
  if (s.mscale != 0 && s.mscale_all_dim != 0)
    return float(yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim));
  return float(yarn_mscale(s.factor, 1.0));
}

ModelConfig load_hf_config(const std::string& path, const std::string& overrides) {
  std::ifstream in(path);
  if (!in) fail("cannot open {}", path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
  if (!overrides.empty()) {
    json o;
    try {
      o = json::parse(overrides);
    } catch (const json::exception& e) {
      fail("--hf-overrides: not valid JSON: {}", e.what());
    }
    if (!o.is_object() || !j.is_object()) fail("--hf-overrides: expected a JSON object, e.g. {{\"num_hidden_layers\": 4}}");
    j.update(o);  // top-level keys replace the file's, as vLLM's --hf-overrides
  }
  try {
    return parse_hf_config(j);
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
}

std::vector<float> rope_inv_freq(const ModelConfig& c, int rotary_dim) {
  std::vector<float> inv(rotary_dim / 2);
  for (int i = 0; i < rotary_dim / 2; ++i)
    inv[i] = float(1.0 / std::pow(double(c.rope_theta), double(2 * i) / rotary_dim));
  const RopeScaling& s = c.rope_scaling;
  if (s.type == "linear") {
    for (auto& f : inv) f /= s.factor;
  } else if (s.type == "llama3") {
    // transformers _compute_llama3_parameters
    const double old_ctx = s.original_max_position_embeddings;
    const double low_wl = old_ctx / s.low_freq_factor, high_wl = old_ctx / s.high_freq_factor;
    for (auto& f : inv) {
      double wl = 2 * M_PI / f;
      if (wl > low_wl) {
        f = float(f / s.factor);
      } else if (wl >= high_wl) {
        double smooth = (old_ctx / wl - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = float((1 - smooth) * f / s.factor + smooth * f);
      }
    }
  } else if (s.type == "yarn") {
    // transformers _compute_yarn_parameters (truncate=True).
    const double base = c.rope_theta, dim = rotary_dim, lorig = s.original_max_position_embeddings;
    auto corr_dim = [&](double n) { return dim * std::log(lorig / (n * 2 * M_PI)) / (2 * std::log(base)); };
    double low = std::max(std::floor(corr_dim(s.beta_fast)), 0.0);
    double high = std::min(std::ceil(corr_dim(s.beta_slow)), dim - 1);
    if (low == high) high += 0.001;
    for (int i = 0; i < rotary_dim / 2; ++i) {
      double extrap = 1.0 / std::pow(base, 2.0 * i / dim), interp = extrap / s.factor;
      double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      double mask = 1.0 - ramp;  // extrapolation factor 1
      inv[i] = float(interp * (1 - mask) + extrap * mask);
    }
  }
  return inv;
}

}  // namespace mx
