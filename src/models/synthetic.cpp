#include "models/synthetic.h"

#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/tensor.h"
#include "io/safetensors.h"

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace mx {

namespace {

struct Shape {
  int hidden, inter, layers, heads, kv_heads, head_dim, vocab, ctx;
};

Shape preset_shape(const std::string& preset) {
  if (preset == "tiny") return {64, 160, 2, 4, 2, 16, 320, 512};
  if (preset == "small") return {256, 704, 4, 8, 4, 32, 2048, 2048};
  // Qwen2.5-0.5B's shape: ~0.5B parameters, the realistic small dense model.
  if (preset == "medium") return {896, 4864, 24, 14, 2, 64, 151936, 32768};
  fail("unknown preset '{}' (tiny, small, medium)", preset);
}

// splitmix64 + Box-Muller: deterministic on every platform.
class Normal {
 public:
  explicit Normal(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  float operator()() {
    if (have_) {
      have_ = false;
      return spare_;
    }
    double u1 = (next() >> 11) * 0x1.0p-53, u2 = (next() >> 11) * 0x1.0p-53;
    if (u1 < 1e-300) u1 = 1e-300;
    double r = std::sqrt(-2 * std::log(u1)), th = 2 * M_PI * u2;
    spare_ = float(r * std::sin(th));
    have_ = true;
    return float(r * std::cos(th));
  }

 private:
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t s_;
  bool have_ = false;
  float spare_ = 0;
};

class Writer {
 public:
  Writer(DType dt, uint64_t seed) : dt_(dt), rng_(seed) {}
  // Gaussian(mean, std) weights.
  void add(const std::string& name, std::vector<int64_t> dims, float std, float mean = 0.0f) {
    OwnedTensor o = OwnedTensor::make(dt_, dims);
    const int64_t n = o.t.numel();
    for (int64_t i = 0; i < n; ++i) {
      float v = mean + std * rng_();
      if (dt_ == DType::F32)
        o.t.as<float>()[i] = v;
      else
        o.t.as<uint16_t>()[i] = f32_to_bf16(v);
    }
    params_ += n;
    owned_.push_back(std::move(o));
    list_.push_back({name, owned_.back().t});
  }
  // Always F32, whatever the checkpoint dtype (e_score_correction_bias is kept in
  // fp32 by transformers' _keep_in_fp32_modules).
  void add_f32(const std::string& name, std::vector<int64_t> dims, float std) {
    OwnedTensor o = OwnedTensor::make(DType::F32, dims);
    for (int64_t i = 0; i < o.t.numel(); ++i) o.t.as<float>()[i] = std * rng_();
    params_ += o.t.numel();
    owned_.push_back(std::move(o));
    list_.push_back({name, owned_.back().t});
  }
  const std::vector<NamedTensor>& list() const { return list_; }
  int64_t params() const { return params_; }

 private:
  DType dt_;
  Normal rng_;
  std::deque<OwnedTensor> owned_;  // stable addresses: list_ views them
  std::vector<NamedTensor> list_;
  int64_t params_ = 0;
};

}  // namespace

namespace {

struct MoeShape {
  int experts, topk, moe_inter, shared, n_group, topk_group, first_dense, mtp;
};
struct MlaShape {
  int q_rank, kv_rank, nope, rope, v;
};

MoeShape moe_shape(const std::string& arch, const std::string& preset) {
  const bool ds = arch == "deepseek_v3", qwen = arch == "qwen3_moe";
  const int shared = qwen ? 0 : 1, mtp = qwen ? 0 : 1;
  if (preset == "tiny") return {8, 3, 32, shared, ds ? 4 : 1, ds ? 2 : 1, qwen ? 0 : 1, mtp};
  if (preset == "small") return {16, 4, 128, shared, ds ? 4 : 1, ds ? 2 : 1, qwen ? 0 : 1, mtp};
  // medium: ~1.5B total parameters, ~0.2B active per token (GLM-4.5-Air /
  // DeepSeek-V3 / Qwen3-30B-A3B proportions scaled down).
  return {64, 8, 512, shared, ds ? 8 : 1, ds ? 4 : 1, qwen ? 0 : 1, mtp};
}

MlaShape mla_shape(const std::string& preset) {
  if (preset == "tiny") return {64, 32, 16, 8, 16};
  if (preset == "small") return {128, 96, 32, 16, 32};
  return {384, 256, 64, 32, 64};
}

Shape moe_model_shape(const std::string& preset) {
  if (preset == "tiny") return {64, 160, 3, 4, 2, 16, 320, 512};
  if (preset == "small") return {256, 704, 4, 8, 4, 32, 2048, 2048};
  if (preset == "medium") return {1024, 2816, 12, 16, 4, 64, 32000, 8192};
  fail("unknown preset '{}' (tiny, small, medium)", preset);
}

// Tensors of one GQA attention block.
void add_gqa(Writer& w, const std::string& p, const Shape& s, bool bias, bool qk_norm) {
  const int qd = s.heads * s.head_dim, kvd = s.kv_heads * s.head_dim;
  w.add(p + "self_attn.q_proj.weight", {qd, s.hidden}, 0.02f);
  w.add(p + "self_attn.k_proj.weight", {kvd, s.hidden}, 0.02f);
  w.add(p + "self_attn.v_proj.weight", {kvd, s.hidden}, 0.02f);
  if (bias) {
    w.add(p + "self_attn.q_proj.bias", {qd}, 0.02f);
    w.add(p + "self_attn.k_proj.bias", {kvd}, 0.02f);
    w.add(p + "self_attn.v_proj.bias", {kvd}, 0.02f);
  }
  w.add(p + "self_attn.o_proj.weight", {s.hidden, qd}, 0.02f);
  if (qk_norm) {
    w.add(p + "self_attn.q_norm.weight", {s.head_dim}, 0.05f, 1.0f);
    w.add(p + "self_attn.k_norm.weight", {s.head_dim}, 0.05f, 1.0f);
  }
}

// Tensors of one MLA attention block (DeepSeek-V3 names).
void add_mla(Writer& w, const std::string& p, const Shape& s, const MlaShape& m) {
  w.add(p + "self_attn.q_a_proj.weight", {m.q_rank, s.hidden}, 0.02f);
  w.add(p + "self_attn.q_a_layernorm.weight", {m.q_rank}, 0.05f, 1.0f);
  w.add(p + "self_attn.q_b_proj.weight", {s.heads * (m.nope + m.rope), m.q_rank}, 0.05f);
  w.add(p + "self_attn.kv_a_proj_with_mqa.weight", {m.kv_rank + m.rope, s.hidden}, 0.02f);
  w.add(p + "self_attn.kv_a_layernorm.weight", {m.kv_rank}, 0.05f, 1.0f);
  w.add(p + "self_attn.kv_b_proj.weight", {s.heads * (m.nope + m.v), m.kv_rank}, 0.05f);
  w.add(p + "self_attn.o_proj.weight", {s.hidden, s.heads * m.v}, 0.02f);
}

void add_mlp(Writer& w, const std::string& p, int hidden, int inter) {
  w.add(p + "gate_proj.weight", {inter, hidden}, 0.02f);
  w.add(p + "up_proj.weight", {inter, hidden}, 0.02f);
  w.add(p + "down_proj.weight", {hidden, inter}, 0.02f);
}

void add_moe(Writer& w, const std::string& p, int hidden, const MoeShape& m, bool sigmoid) {
  w.add(p + "mlp.gate.weight", {m.experts, hidden}, 0.05f);
  if (sigmoid) w.add_f32(p + "mlp.gate.e_score_correction_bias", {m.experts}, 0.02f);
  for (int e = 0; e < m.experts; ++e) add_mlp(w, fmt::format("{}mlp.experts.{}.", p, e), hidden, m.moe_inter);
  if (m.shared) add_mlp(w, p + "mlp.shared_experts.", hidden, m.moe_inter * m.shared);
}

}  // namespace

int64_t write_synthetic_model(const std::string& dir, const SyntheticSpec& spec) {
  MX_CHECK(spec.dtype == DType::F32 || spec.dtype == DType::BF16,
           "synthetic models are F32 or BF16, not {}", dtype_name(spec.dtype));
  const std::string& arch = spec.arch;
  const bool moe = arch == "glm4_moe" || arch == "deepseek_v3" || arch == "qwen3_moe";
  std::string arch_hf;
  bool bias = false, qk_norm = false, tied = !moe && spec.preset != "small";
  if (arch == "llama") arch_hf = "LlamaForCausalLM";
  else if (arch == "qwen2") arch_hf = "Qwen2ForCausalLM", bias = true;
  else if (arch == "qwen3") arch_hf = "Qwen3ForCausalLM", qk_norm = true;
  else if (arch == "glm4_moe") arch_hf = "Glm4MoeForCausalLM", bias = true, qk_norm = true;
  else if (arch == "deepseek_v3") arch_hf = "DeepseekV3ForCausalLM";
  else if (arch == "qwen3_moe") arch_hf = "Qwen3MoeForCausalLM", qk_norm = true;
  else fail("make-test-model: unknown arch '{}' (llama, qwen2, qwen3, glm4_moe, deepseek_v3, qwen3_moe)", arch);
  const Shape s = moe ? moe_model_shape(spec.preset) : preset_shape(spec.preset);

  json cfg = {
      {"architectures", {arch_hf}},
      {"model_type", arch},
      {"hidden_size", s.hidden},
      {"intermediate_size", s.inter},
      {"num_hidden_layers", s.layers},
      {"num_attention_heads", s.heads},
      {"num_key_value_heads", s.kv_heads},
      {"head_dim", s.head_dim},
      {"vocab_size", s.vocab},
      {"max_position_embeddings", s.ctx},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", arch == "llama" ? 500000.0 : arch == "deepseek_v3" ? 10000.0 : 1000000.0},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", tied},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
      {"torch_dtype", spec.dtype == DType::F32 ? "float32" : "bfloat16"},
  };
  if (arch == "llama") {
    cfg["attention_bias"] = false;
    cfg["mlp_bias"] = false;
    cfg["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 128}};
  }
  if (arch == "qwen3" || arch == "qwen3_moe") cfg["attention_bias"] = false;
  if (arch == "qwen2" || arch == "qwen3" || arch == "qwen3_moe") cfg["use_sliding_window"] = false;
  MoeShape ms{};
  MlaShape mla{};
  if (moe) {
    ms = moe_shape(arch, spec.preset);
    cfg["moe_intermediate_size"] = ms.moe_inter;
    cfg["num_experts_per_tok"] = ms.topk;
    cfg["norm_topk_prob"] = true;
    if (arch == "qwen3_moe") {
      cfg["num_experts"] = ms.experts;
      cfg["decoder_sparse_step"] = 1;
      cfg["mlp_only_layers"] = json::array({0});  // exercise a dense layer
    } else {
      cfg["n_routed_experts"] = ms.experts;
      cfg["n_shared_experts"] = ms.shared;
      cfg["n_group"] = ms.n_group;
      cfg["topk_group"] = ms.topk_group;
      cfg["routed_scaling_factor"] = 2.5;
      cfg["first_k_dense_replace"] = ms.first_dense;
      cfg["num_nextn_predict_layers"] = ms.mtp;
    }
    if (arch == "glm4_moe") {
      cfg["partial_rotary_factor"] = 0.5;
      cfg["attention_bias"] = true;
      cfg["use_qk_norm"] = true;
    }
    if (arch == "deepseek_v3") {
      mla = mla_shape(spec.preset);
      cfg["q_lora_rank"] = mla.q_rank;
      cfg["kv_lora_rank"] = mla.kv_rank;
      cfg["qk_nope_head_dim"] = mla.nope;
      cfg["qk_rope_head_dim"] = mla.rope;
      cfg["v_head_dim"] = mla.v;
      cfg["head_dim"] = mla.rope;
      cfg["scoring_func"] = "sigmoid";
      cfg["topk_method"] = "noaux_tc";
      cfg["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"beta_fast", 32}, {"beta_slow", 1},
                             {"mscale", 1.0}, {"mscale_all_dim", 1.0},
                             {"original_max_position_embeddings", s.ctx / 4}};
    }
  }

  Writer w(spec.dtype, spec.seed);
  // Scales: embeddings and projections ~N(0, 0.02) as in HF init; norms near 1
  // so activations keep a realistic range through the layers.
  w.add("model.embed_tokens.weight", {s.vocab, s.hidden}, 0.02f);
  auto layer = [&](int l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    w.add(p + "input_layernorm.weight", {s.hidden}, 0.05f, 1.0f);
    if (arch == "deepseek_v3") add_mla(w, p, s, mla);
    else add_gqa(w, p, s, bias, qk_norm);
    w.add(p + "post_attention_layernorm.weight", {s.hidden}, 0.05f, 1.0f);
    const bool moe_layer = moe && (arch == "qwen3_moe" ? l != 0 : l >= ms.first_dense);
    if (moe_layer) add_moe(w, p, s.hidden, ms, arch != "qwen3_moe");
    else add_mlp(w, p + "mlp.", s.hidden, s.inter);
  };
  for (int l = 0; l < s.layers; ++l) layer(l);
  w.add("model.norm.weight", {s.hidden}, 0.05f, 1.0f);
  if (!tied) w.add("lm_head.weight", {s.vocab, s.hidden}, 0.02f);
  for (int i = 0; i < ms.mtp; ++i) {
    // The MTP layer as GLM-4.5 / DeepSeek-V3 checkpoints store it, with its
    // own copies of embed_tokens and shared_head.head.
    const int l = s.layers + i;
    const std::string p = fmt::format("model.layers.{}.", l);
    w.add(p + "enorm.weight", {s.hidden}, 0.05f, 1.0f);
    w.add(p + "hnorm.weight", {s.hidden}, 0.05f, 1.0f);
    w.add(p + "eh_proj.weight", {s.hidden, 2 * s.hidden}, 0.02f);
    w.add(p + "embed_tokens.weight", {s.vocab, s.hidden}, 0.02f);
    w.add(p + "shared_head.norm.weight", {s.hidden}, 0.05f, 1.0f);
    w.add(p + "shared_head.head.weight", {s.vocab, s.hidden}, 0.02f);
    layer(l);
  }

  fs::create_directories(dir);
  write_safetensors_sharded(dir, w.list(), spec.max_shard_bytes, {{"format", "pt"}});
  std::ofstream out(fs::path(dir) / "config.json");
  out << cfg.dump(2) << "\n";
  MX_CHECK(bool(out), "cannot write {}/config.json", dir);
  return w.params();
}

}  // namespace mx
