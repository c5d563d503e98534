// GGUF file -> ModelConfig + TensorStore with HF names (docs/gguf.md).
#include <cstring>
#include <fstream>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/mapped_file.h"
#include "formats/ggml_dequant.h"
#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "formats/gguf_names.h"
#include "formats/gguf_rows.h"

using json = nlohmann::json;

namespace mx {

bool is_gguf_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char m[4] = {};
  return f.read(m, 4) && std::memcmp(m, "GGUF", 4) == 0;
}

namespace {

const char* hf_arch_name(Arch a) { return arch_name(a); }

// The config.json our parser would have read for this model.
json config_json(const GgufFile& g, Arch arch, const std::string& A) {
  auto u = [&](const char* k) { return g.get_u32(A + k); };
  auto u_or = [&](const char* k, uint32_t d) { return g.get_u32_or(A + k, d); };
  json j;
  j["architectures"] = {hf_arch_name(arch)};
  const uint32_t blocks = u("block_count"), nextn = u_or("nextn_predict_layers", 0);
  if (nextn >= blocks) fail("{}: {}nextn_predict_layers {} >= block_count {}", g.path(), A, nextn, blocks);
  const uint32_t hidden = u("embedding_length"), heads = u("attention.head_count");
  if (heads == 0) fail("{}: {}attention.head_count is 0", g.path(), A);
  j["hidden_size"] = hidden;
  j["num_hidden_layers"] = blocks - nextn;
  j["intermediate_size"] = u_or("feed_forward_length", 0);
  j["num_attention_heads"] = heads;
  j["num_key_value_heads"] = u_or("attention.head_count_kv", heads);
  const uint32_t head_dim = u_or("attention.key_length", hidden / heads);
  j["head_dim"] = head_dim;
  if (arch != Arch::DeepseekV3 && u_or("attention.value_length", head_dim) != head_dim)
    fail("{}: {}attention.value_length differs from key_length (not supported)", g.path(), A);
  const GgufTensorInfo& emb = g.tensor("token_embd.weight");
  if (emb.dims.size() != 2) fail("{}: token_embd.weight must be 2-D, is {}", g.path(), emb.shape_str());
  j["vocab_size"] = emb.dims[1];
  j["max_position_embeddings"] = u_or("context_length", 2048);
  j["rms_norm_eps"] = float(g.get_f64_or(A + "attention.layer_norm_rms_epsilon", 1e-6));
  j["rope_theta"] = float(g.get_f64_or(A + "rope.freq_base", 10000.0));
  j["tie_word_embeddings"] = g.find_tensor("output.weight") == nullptr;
  if (g.has("tokenizer.ggml.bos_token_id")) j["bos_token_id"] = g.get_u32("tokenizer.ggml.bos_token_id");
  if (g.has("mxserve.eos_token_ids")) j["eos_token_id"] = g.get_i32_array("mxserve.eos_token_ids");
  else if (g.has("tokenizer.ggml.eos_token_id")) j["eos_token_id"] = g.get_u32("tokenizer.ggml.eos_token_id");

  // RoPE scaling: our writer stores the HF object verbatim (mxserve.rope_scaling)
  // because llama.cpp keeps llama3 scaling only as a rope_freqs tensor.
  if (g.has("mxserve.rope_scaling")) {
    j["rope_scaling"] = json::parse(g.get_string("mxserve.rope_scaling"), nullptr, false);
    if (j["rope_scaling"].is_discarded()) fail("{}: mxserve.rope_scaling is not JSON", g.path());
  } else if (g.find_tensor("rope_freqs.weight")) {
    fail("{}: rope_freqs.weight (per-dimension RoPE factors, llama3 scaling) is not supported without "
         "mxserve.rope_scaling", g.path());
  } else {
    const std::string type = g.get_string_or(A + "rope.scaling.type", "none");
    const float factor = float(g.get_f64_or(A + "rope.scaling.factor", 1.0));
    if (type == "linear") {
      j["rope_scaling"] = {{"type", "linear"}, {"factor", factor}};
    } else if (type == "yarn") {
      j["rope_scaling"] = {{"type", "yarn"}, {"factor", factor},
                           {"original_max_position_embeddings", u_or("rope.scaling.original_context_length", 0)}};
    } else if (type != "none") {
      fail("{}: {}rope.scaling.type '{}' is not supported (none, linear, yarn)", g.path(), A, type);
    }
  }
  const bool bias = g.find_tensor("blk.0.attn_q.bias") != nullptr;
  const uint32_t gating = u_or("expert_gating_func", 0);  // llama.cpp: 1 softmax, 2 sigmoid
  auto moe_common = [&] {
    j["num_experts_per_tok"] = u("expert_used_count");
    j["moe_intermediate_size"] = u("expert_feed_forward_length");
    j["norm_topk_prob"] = g.get_bool_or(A + "expert_weights_norm", true);
  };
  switch (arch) {
    case Arch::Llama:
    case Arch::Qwen3:
      j["attention_bias"] = bias;
      break;
    case Arch::Qwen2: break;
    case Arch::Qwen3Moe: {
      if (gating != 0 && gating != 1) fail("{}: qwen3moe with expert_gating_func {} (expected softmax)", g.path(), gating);
      j["attention_bias"] = bias;
      j["num_experts"] = u("expert_count");
      moe_common();
      // llama.cpp's qwen3moe has experts in every layer; ours also reads dense ones.
      json dense = json::array();
      for (uint32_t l = 0; l < blocks; ++l)
        if (!g.find_tensor(fmt::format("blk.{}.ffn_gate_inp.weight", l))) dense.push_back(l);
      j["mlp_only_layers"] = dense;
      break;
    }
    case Arch::Glm4Moe:
    case Arch::DeepseekV3: {
      if (gating != 0 && gating != 2) fail("{}: {} with expert_gating_func {} (expected sigmoid)", g.path(), A, gating);
      if (arch == Arch::Glm4Moe) {
        j["attention_bias"] = bias;
        j["use_qk_norm"] = g.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
        const uint32_t rot = u_or("rope.dimension_count", head_dim / 2);
        j["partial_rotary_factor"] = float(rot) / float(head_dim);
      } else {
        // MLA in llama.cpp's legacy (unsplit attn_kv_b) form: key_length = nope + rope.
        const uint32_t rope = u("rope.dimension_count");
        if (rope >= head_dim) fail("{}: {}rope.dimension_count {} >= key_length {}", g.path(), A, rope, head_dim);
        j["q_lora_rank"] = u_or("attention.q_lora_rank", 0);
        j["kv_lora_rank"] = u("attention.kv_lora_rank");
        j["qk_rope_head_dim"] = rope;
        j["qk_nope_head_dim"] = head_dim - rope;
        j["v_head_dim"] = u("attention.value_length");
      }
      j["n_routed_experts"] = u("expert_count");
      j["n_shared_experts"] = u_or("expert_shared_count", 0);
      moe_common();
      j["n_group"] = u_or("expert_group_count", 1);
      j["topk_group"] = u_or("expert_group_used_count", 1);
      j["routed_scaling_factor"] = float(g.get_f64_or(A + "expert_weights_scale", 1.0));
      j["first_k_dense_replace"] = u_or("leading_dense_block_count", 0);
      j["num_nextn_predict_layers"] = nextn;
      break;
    }
  }
  return j;
}

struct Reader {
  const GgufFile& g;
  const ModelConfig& c;
  TensorStore& store;
  std::set<std::string> mx_linears;

  // Adds one HF tensor from GGUF data of `type` with HF shape [rows, cols] (or [n]).
  void add(const std::string& hf, const uint8_t* data, uint32_t type, std::vector<int64_t> shape) {
    const int64_t heads = gguf_names::llama_permuted_heads(hf, c);  // undo llama.cpp's Q/K permutation
    if (heads && !RowOrder::llama_permutable(shape, heads))
      fail("{}: {} has shape {}, whose rows do not split into {} heads of an even size (llama.cpp's Q/K row "
           "order cannot be undone)", g.path(), hf, fmt::join(shape, "x"), heads);
    // A permuted bias is rows of one value (a float type: a block type's row would hold 32).
    const bool bias = heads && shape.size() == 1;
    if (bias && type != ggml_type::F32 && type != ggml_type::F16 && type != ggml_type::BF16)
      fail("{}: {} is a Q/K bias of ggml type {}; mxserve reads them as F32, F16 or BF16", g.path(), hf, type);
    const int64_t cols = bias ? 1 : shape.back(), rows = shape.size() == 1 && !bias ? 1 : shape[0];
    const RowOrder order = heads ? RowOrder::llama_unpermute(rows, heads) : RowOrder::identity(rows);
    const GgmlTypeInfo* ti = ggml_type_info(type);
    const uint64_t row_bytes = uint64_t(cols / ti->block_size) * ti->type_size;
    if ((type == ggml_type::F32 || type == ggml_type::BF16) && !heads) {
      store.add(hf, Tensor(type == ggml_type::F32 ? DType::F32 : DType::BF16, shape, const_cast<uint8_t*>(data)), g.path());
      return;
    }
    if (type == ggml_type::F32 || type == ggml_type::BF16) {
      OwnedTensor o = OwnedTensor::make(type == ggml_type::F32 ? DType::F32 : DType::BF16, shape);
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(static_cast<uint8_t*>(o.t.data) + r * row_bytes, data + order.src(r) * row_bytes, row_bytes);
      store.add_owned(hf, std::move(o), g.path());
      return;
    }
    if (type == ggml_type::F16) {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(data);
      bool exact = true;  // every value survives f16 -> bf16 (true for bf16-born weights in range)
      for (int64_t i = 0; i < rows * cols && exact; ++i) {
        const float f = f16_to_f32(h[i]);
        exact = bf16_to_f32(f32_to_bf16(f)) == f;
      }
      OwnedTensor o = OwnedTensor::make(exact ? DType::BF16 : DType::F32, shape);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < cols; ++i) {
          const float f = f16_to_f32(h[order.src(r) * cols + i]);
          if (exact) o.t.as<uint16_t>()[r * cols + i] = f32_to_bf16(f);
          else o.t.as<float>()[r * cols + i] = f;
        }
      store.add_owned(hf, std::move(o), g.path());
      return;
    }
    if (type == ggml_type::MXFP4) {
      if (shape.size() != 2 || !hf.ends_with(".weight"))
        fail("{}: {} is MXFP4 but is not a Linear weight", g.path(), hf);
      OwnedTensor packed = OwnedTensor::make(DType::U8, {rows, cols / 2});
      OwnedTensor scales = OwnedTensor::make(DType::U8, {rows, cols / 32});
      for (int64_t r = 0; r < rows; ++r)
        ggml::mxfp4_row_from_ggml(data + order.src(r) * row_bytes, cols, packed.t.as<uint8_t>() + r * cols / 2,
                                  scales.t.as<uint8_t>() + r * cols / 32);
      const std::string prefix = hf.substr(0, hf.size() - 7);
      store.add_owned(hf, std::move(packed), g.path());
      store.add_owned(prefix + ".weight_scale", std::move(scales), g.path());
      mx_linears.insert(prefix);
      return;
    }
    if (ggml::can_dequantize(type)) {
      OwnedTensor o = OwnedTensor::make(DType::F32, shape);
      for (int64_t r = 0; r < rows; ++r)
        ggml::dequantize_row(type, data + order.src(r) * row_bytes, cols, o.t.as<float>() + r * cols);
      store.add_owned(hf, std::move(o), g.path());
      return;
    }
    fail("{}: tensor {} has ggml type {}, which mxserve cannot load (F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q6_K, "
         "MXFP4)", g.path(), hf, ti->name);
  }
};

}  // namespace

GgufCheckpoint read_gguf_checkpoint(const std::string& path) {
  GgufFile g(path);
  const std::string arch_s = g.get_string("general.architecture");
  const auto arch = gguf_names::arch_from_gguf(arch_s);
  if (!arch)
    fail("{}: GGUF architecture '{}' is not supported (supported: {})", path, arch_s, gguf_names::supported_archs());
  GgufCheckpoint ck;
  ck.config = parse_hf_config(config_json(g, *arch, arch_s + "."));
  ck.tensors = std::make_shared<TensorStore>();
  ck.tensors->keep_alive(g.mapping());
  Reader rd{g, ck.config, *ck.tensors, {}};
  for (const GgufTensorInfo& ti : g.tensors()) {
    if (ti.name == "rope_freqs.weight") continue;  // llama3 factors; the config carries the exact scaling
    std::vector<int64_t> shape(ti.dims.rbegin(), ti.dims.rend());  // GGUF ne[0] first -> row-major
    if (shape.empty()) fail("{}: tensor {} has no dimensions", path, ti.name);
    if (auto ex = gguf_names::parse_gguf_experts(ti.name)) {
      if (shape.size() != 3) fail("{}: {} must be 3-D [experts, out, in], is {}", path, ti.name, ti.shape_str());
      const int64_t n_experts = ck.config.moe.n_routed_experts;
      if (n_experts < 1) fail("{}: {} is a stack of experts, but the model has no routed experts", path, ti.name);
      if (shape[0] != n_experts)
        fail("{}: {} stacks {} experts; the model has {} routed experts", path, ti.name, shape[0], n_experts);
      const uint64_t per = ti.nbytes / uint64_t(shape[0]);
      for (int64_t e = 0; e < shape[0]; ++e)
        rd.add(gguf_names::hf_expert(ex->layer, int(e), ex->proj), ti.data + e * per, ti.type, {shape[1], shape[2]});
      continue;
    }
    const auto hf = gguf_names::from_gguf(ti.name, *arch);
    if (!hf) fail("{}: tensor {} has no mxserve equivalent for architecture {}", path, ti.name, arch_s);
    if (shape.size() > 2) fail("{}: {} has {} dims (expected 1 or 2)", path, ti.name, shape.size());
    rd.add(*hf, ti.data, ti.type, shape);
  }
  if (!rd.mx_linears.empty()) {
    // Quark-style config: every Linear stored unquantized is excluded by name.
    QuantConfig& q = ck.config.quant;
    q.method = QuantMethod::Mxfp4;
    for (const auto& name : ck.tensors->names()) {
      const Tensor& t = ck.tensors->get(name);
      if (t.ndim != 2 || !name.ends_with(".weight")) continue;
      const std::string prefix = name.substr(0, name.size() - 7);
      if (!rd.mx_linears.count(prefix)) q.exclude.push_back(prefix);
    }
  }
  return ck;
}

}  // namespace mx
