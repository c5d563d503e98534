// HF checkpoint -> GGUF for llama.cpp (mxserve convert; docs/gguf.md).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/ggml_dequant.h"
#include "formats/gguf.h"
#include "convert/gguf_export.h"
#include "formats/gguf_model.h"
#include "tokenizer/tokenizer.h"
#include "formats/gguf_names.h"
#include "formats/gguf_rows.h"
#include "formats/gguf_writer.h"
#include "quant/mxfp4.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace mx {

GgufOutType gguf_out_type(const std::string& s) {
  if (s == "f32") return GgufOutType::F32;
  if (s == "f16") return GgufOutType::F16;
  if (s == "bf16") return GgufOutType::BF16;
  if (s == "mxfp4") return GgufOutType::MXFP4;
  fail("GGUF output type '{}' is not one of f32, f16, bf16, mxfp4", s);
}

namespace {

uint32_t ggml_of(DType d) {
  switch (d) {
    case DType::F32: return ggml_type::F32;
    case DType::F16: return ggml_type::F16;
    case DType::BF16: return ggml_type::BF16;
    case DType::MXFP4: return ggml_type::MXFP4;
    default: fail("GGUF writer: no ggml type for {}", dtype_name(d));
  }
}

// One HF weight as a logical [rows, cols] tensor: float, or MXFP4 with scales.
Tensor logical(const TensorStore& s, const std::string& name) {
  const Tensor& t = s.get(name);
  const std::string scale = name.substr(0, name.size() - 7) + ".weight_scale";
  if (name.ends_with(".weight") && s.contains(scale)) {
    const Tensor& sc = s.get(scale);
    MX_CHECK(t.dtype == DType::U8 && t.ndim == 2 && sc.dtype == DType::U8 && sc.ndim == 2 && sc.dim(0) == t.dim(0) &&
                 t.dim(1) % 16 == 0 && sc.dim(1) == t.dim(1) / 16,
             "GGUF writer: {} ({} {}) with {} ({} {}) is not an MXFP4 weight (U8 [rows, cols / 2] with U8 scales "
             "[rows, cols / 32])", name, dtype_name(t.dtype), t.shape_str(), scale, dtype_name(sc.dtype), sc.shape_str());
    Tensor m(DType::MXFP4, {t.dim(0), t.dim(1) * 2}, t.data);
    m.scales = sc.data;
    return m;
  }
  MX_CHECK(t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::F16,
           "GGUF writer: {} is {}; only float and MXFP4 tensors can be written (llama.cpp has no block-FP8 "
           "type: convert the unquantized original)", name, dtype_name(t.dtype));
  return t;
}

// Appends `parts` (stacked along a new leading dim when more than one), each
// [rows, cols] with rows in `order`, converted to ggml type `out`. Every output row
// has the same size, so the rows are converted in parallel, each into its place
// (quantizing a model's weights is most of a conversion's time).
void produce(const std::vector<Tensor>& parts, RowOrder order, uint32_t out, std::vector<uint8_t>& buf) {
  for (const Tensor& t : parts) {
    // A permuted 1-D tensor (a llama Q/K bias) is n rows of one value (convert_hf_to_gguf.py
    // permutes those too).
    const bool bias = t.ndim == 1 && order.kind != RowOrder::Identity;
    const int64_t cols = bias ? 1 : t.dim(-1), rows = t.numel() / cols;
    const GgmlTypeInfo* ti = ggml_type_info(out);
    MX_CHECK(ti && (out == ggml_type::F32 || out == ggml_type::F16 || out == ggml_type::BF16 ||
                    out == ggml_type::MXFP4) && cols % ti->block_size == 0,
             "GGUF writer: cannot write rows of {} values as ggml type {}", cols, out);
    const int64_t row_bytes = cols / ti->block_size * int64_t(ti->type_size);
    const size_t base = buf.size();
    buf.resize(base + size_t(rows * row_bytes));
    global_pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
      std::vector<float> row(cols);
      std::vector<uint8_t> packed(cols / 2), scales(cols / 32 + 1);
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t sr = order.src(r);
        uint8_t* dst = buf.data() + base + r * row_bytes;
        if (t.dtype == DType::MXFP4) {
          const uint8_t* p = static_cast<const uint8_t*>(t.data) + sr * cols / 2;
          const uint8_t* sc = static_cast<const uint8_t*>(t.scales) + sr * cols / 32;
          if (out == ggml_type::MXFP4) {
            ggml::mxfp4_row_to_ggml(p, sc, cols, dst);
            continue;
          }
          mxfp4::dequantize_row(p, sc, cols, row.data());
        } else if (t.dtype == DType::BF16 && out == ggml_type::BF16) {
          std::memcpy(dst, static_cast<const uint8_t*>(t.data) + sr * cols * 2, size_t(cols * 2));
          continue;
        } else {
          for (int64_t i = 0; i < cols; ++i) row[i] = load_as_f32(t.data, t.dtype, sr * cols + i);
        }
        switch (out) {
          case ggml_type::F32: std::memcpy(dst, row.data(), size_t(cols * 4)); break;
          case ggml_type::F16:
          case ggml_type::BF16:
            for (int64_t i = 0; i < cols; ++i) {
              const uint16_t h = out == ggml_type::F16 ? f32_to_f16(row[i]) : f32_to_bf16(row[i]);
              std::memcpy(dst + 2 * i, &h, 2);
            }
            break;
          default:  // MXFP4 (checked above) from float: exactly what `mxserve quantize` computes (ScaleRule::Spec)
            mxfp4::quantize_row(row.data(), cols, packed.data(), scales.data(), mxfp4::ScaleRule::Spec);
            ggml::mxfp4_row_to_ggml(packed.data(), scales.data(), cols, dst);
        }
      }
    });
  }
}

// llama.cpp's llama3 RoPE factors (convert_hf_to_gguf.py LlamaModel.generate_extra_tensors).
std::vector<float> llama3_rope_factors(const ModelConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  const int dim = c.rotary_dim();
  const double old_ctx = s.original_max_position_embeddings;
  const double low_wl = old_ctx / s.low_freq_factor, high_wl = old_ctx / s.high_freq_factor;
  std::vector<float> f;
  for (int i = 0; i < dim; i += 2) {
    const double freq = 1.0 / std::pow(double(c.rope_theta), double(i) / dim);
    const double wl = 2 * M_PI / freq;
    if (wl < high_wl) f.push_back(1.0f);
    else if (wl > low_wl) f.push_back(s.factor);
    else {
      const double smooth = (old_ctx / wl - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f.push_back(float(1.0 / ((1 - smooth) / s.factor + smooth)));
    }
  }
  return f;
}

json rope_scaling_json(const RopeScaling& s) {
  json r = {{"rope_type", s.type}, {"factor", s.factor}};
  if (s.type == "llama3")
    r.update({{"low_freq_factor", s.low_freq_factor}, {"high_freq_factor", s.high_freq_factor},
              {"original_max_position_embeddings", s.original_max_position_embeddings}});
  if (s.type == "yarn") {
    r.update({{"beta_fast", s.beta_fast}, {"beta_slow", s.beta_slow},
              {"original_max_position_embeddings", s.original_max_position_embeddings}});
    if (s.mscale) r["mscale"] = s.mscale;
    if (s.mscale_all_dim) r["mscale_all_dim"] = s.mscale_all_dim;
    if (s.attention_factor) r["attention_factor"] = s.attention_factor;
  }
  return r;
}

// MTP layers written: llama.cpp's deepseek2 has no nextn tensors (its converter
// drops them, DeepseekV2Model.skip_mtp) and refuses extra ones, so neither do we.
int mtp_layers(const ModelConfig& c) { return c.arch == Arch::DeepseekV3 ? 0 : c.num_nextn_predict_layers; }

void write_metadata(GgufWriter& w, const ModelConfig& c, const std::string& name, GgufOutType type) {
  const std::string A = std::string(gguf_names::arch_to_gguf(c.arch)) + ".";
  w.add_string("general.architecture", gguf_names::arch_to_gguf(c.arch));
  w.add_string("general.name", name);
  // llama.cpp llama_ftype: ALL_F32 0, MOSTLY_F16 1, MOSTLY_BF16 32, MOSTLY_MXFP4_MOE 38.
  w.add_u32("general.file_type", type == GgufOutType::F32 ? 0 : type == GgufOutType::F16 ? 1
                                 : type == GgufOutType::BF16 ? 32 : 38);
  w.add_u32(A + "context_length", c.max_position_embeddings);
  w.add_u32(A + "embedding_length", c.hidden_size);
  w.add_u32(A + "block_count", c.num_hidden_layers + mtp_layers(c));
  w.add_u32(A + "feed_forward_length", c.intermediate_size);
  w.add_u32(A + "attention.head_count", c.num_attention_heads);
  // Legacy-MLA llama.cpp decompresses K/V for every head (MHA), so its kv head count is the head count.
  w.add_u32(A + "attention.head_count_kv", c.mla ? c.num_attention_heads : c.num_key_value_heads);
  if (c.mla) {
    // llama.cpp's legacy MLA form (unsplit attn_kv_b; no key_length_mla), which
    // its deepseek2 still loads: keys are nope + rope wide, values v_head_dim.
    const MlaConfig& a = c.mla_cfg;
    w.add_u32(A + "attention.key_length", a.qk_nope_head_dim + a.qk_rope_head_dim);
    w.add_u32(A + "attention.value_length", a.v_head_dim);
    if (a.q_lora_rank) w.add_u32(A + "attention.q_lora_rank", a.q_lora_rank);
    w.add_u32(A + "attention.kv_lora_rank", a.kv_lora_rank);
  } else {
    w.add_u32(A + "attention.key_length", c.head_dim);
    w.add_u32(A + "attention.value_length", c.head_dim);
  }
  w.add_f32(A + "attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  w.add_f32(A + "rope.freq_base", c.rope_theta);
  w.add_u32(A + "rope.dimension_count", c.rotary_dim());
  w.add_u32(A + "vocab_size", c.vocab_size);
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type != "default") {
    w.add_string("mxserve.rope_scaling", rope_scaling_json(rs).dump());
    if (rs.type == "linear" || rs.type == "yarn") {
      w.add_string(A + "rope.scaling.type", rs.type);
      w.add_f32(A + "rope.scaling.factor", rs.factor);
    }
    if (rs.type == "yarn") w.add_u32(A + "rope.scaling.original_context_length", rs.original_max_position_embeddings);
    if (rs.type == "yarn" && c.mla) w.add_f32(A + "rope.scaling.yarn_log_multiplier", 0.1f * rs.mscale_all_dim);
  }
  const MoeConfig& m = c.moe;
  if (m.n_routed_experts > 0) {
    w.add_u32(A + "expert_count", m.n_routed_experts);
    w.add_u32(A + "expert_used_count", m.num_experts_per_tok);
    w.add_u32(A + "expert_feed_forward_length", m.moe_intermediate_size);
    w.add_bool(A + "expert_weights_norm", m.norm_topk_prob);
    w.add_u32(A + "expert_gating_func", m.sigmoid_router ? 2 : 1);  // LLAMA_EXPERT_GATING_FUNC_TYPE_*
    if (m.sigmoid_router) {
      w.add_u32(A + "expert_shared_count", m.n_shared_experts);
      w.add_u32(A + "leading_dense_block_count", m.first_k_dense_replace);
      w.add_f32(A + "expert_weights_scale", m.routed_scaling_factor);
      w.add_u32(A + "expert_group_count", m.n_group);
      w.add_u32(A + "expert_group_used_count", m.topk_group);
      w.add_u32(A + "nextn_predict_layers", mtp_layers(c));
    }
  }
  if (c.bos_token_id >= 0) w.add_u32("tokenizer.ggml.bos_token_id", c.bos_token_id);
  if (!c.eos_token_ids.empty()) {
    w.add_u32("tokenizer.ggml.eos_token_id", c.eos_token_ids[0]);
    w.add_i32_array("mxserve.eos_token_ids", {c.eos_token_ids.begin(), c.eos_token_ids.end()});
  }
}

// tokenizer.ggml.* from HF tokenizer.json (byte-level BPE, as make-test-model writes).
void write_tokenizer(GgufWriter& w, const ModelConfig& c, const std::string& hf_dir) {
  const fs::path p = fs::path(hf_dir) / "tokenizer.json";
  if (hf_dir.empty() || !fs::exists(p)) return;
  // Read below on its own: first through the loader, whose checks (two texts on one id, an added
  // token over another's id, ...) the GGUF's reader would not repeat.
  load_tokenizer_hf(p.string());
  std::ifstream f(p);
  json tj = json::parse(f, nullptr, false);
  if (tj.is_discarded() || !tj.contains("model") || !tj["model"].is_object())
    fail("{}: not a tokenizer.json", p.string());
  const json& model = tj["model"];
  if (!(model.contains("type") && model["type"] == "BPE")) fail("{}: only BPE tokenizers can be written to GGUF", p.string());
  std::vector<std::string> tokens(c.vocab_size);
  std::vector<int32_t> types(c.vocab_size, 0);
  auto put = [&](int64_t id, const std::string& s, int32_t type) {
    if (id < 0 || id >= c.vocab_size) fail("{}: token id {} outside the model's vocab_size {}", p.string(), id, c.vocab_size);
    tokens[id] = s, types[id] = type;
  };
  for (const auto& [tok, id] : model["vocab"].items()) put(id.get<int64_t>(), tok, 1);  // NORMAL
  if (tj.contains("added_tokens"))
    for (const auto& a : tj["added_tokens"]) put(a["id"].get<int64_t>(), a["content"], a.contains("special") && a["special"] == true ? 3 : 4);
  for (int i = 0; i < c.vocab_size; ++i)
    if (types[i] == 0) tokens[i] = fmt::format("[PAD{}]", i), types[i] = 5;  // UNUSED, as convert_hf_to_gguf.py
  std::vector<std::string> merges;
  for (const auto& m : model["merges"])
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  // Pre-tokenizer names llama.cpp knows (src/llama-vocab.cpp).
  const char* pre = c.arch == Arch::Llama ? "llama-bpe" : c.arch == Arch::Glm4Moe ? "glm4"
                    : c.arch == Arch::DeepseekV3 ? "deepseek-v3" : "qwen2";
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", pre);
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_string_array("tokenizer.ggml.merges", merges);
  w.add_bool("tokenizer.ggml.add_bos_token", c.arch == Arch::Llama);
}

// tokenizer.ggml.* of a SentencePiece-style vocabulary (llama.cpp's "llama"
// model): pieces spelled with "▁", scores, token types.
void write_spm_tokenizer(GgufWriter& w, const ModelConfig& c, const Tokenizer& t) {
  MX_CHECK(t.model == "llama", "a '{}' tokenizer is not SentencePiece-style", t.model);
  MX_CHECK(t.vocab_size <= size_t(c.vocab_size), "the tokenizer has {} tokens, the model's vocabulary {}",
           t.vocab_size, c.vocab_size);
  std::vector<std::string> tokens(size_t(c.vocab_size));
  std::vector<float> scores(size_t(c.vocab_size), 0.0f);
  std::vector<int32_t> types(size_t(c.vocab_size), int32_t(TokenType::Unused));
  for (size_t i = 0; i < size_t(c.vocab_size); ++i) {
    if (i >= t.vocab_size) {
      tokens[i] = fmt::format("[PAD{}]", i);  // as convert_hf_to_gguf.py pads a short vocabulary
      continue;
    }
    tokens[i] = t.token_text(int32_t(i));
    scores[i] = t.token_score(int32_t(i));
    types[i] = int32_t(t.token_type(int32_t(i)));
  }
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string("tokenizer.ggml.pre", "default");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_f32_array("tokenizer.ggml.scores", scores);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  if (t.unk_id >= 0) w.add_u32("tokenizer.ggml.unknown_token_id", uint32_t(t.unk_id));
  w.add_bool("tokenizer.ggml.add_bos_token", t.add_bos);
  w.add_bool("tokenizer.ggml.add_eos_token", t.add_eos);
  w.add_bool("tokenizer.ggml.add_space_prefix", t.add_space_prefix);
}

}  // namespace

ConvertReport write_gguf_checkpoint(const Checkpoint& ck, const std::string& out, GgufOutType type,
                                    const Tokenizer* spm) {
  build_model(ck);  // the checkpoint is complete and every tensor what the model takes (header)
  const ModelConfig& c = ck.config;
  const TensorStore& s = *ck.tensors;
  const std::string& hf_dir = ck.hf_dir;
  GgufWriter w;
  write_metadata(w, c, hf_dir.empty() ? "mxserve" : fs::path(hf_dir).filename().string(), type);
  if (spm) write_spm_tokenizer(w, c, *spm);
  else write_tokenizer(w, c, hf_dir);
  ConvertReport rep;
  const std::vector<std::string> excludes = default_excludes(c.num_hidden_layers, c.num_nextn_predict_layers);
  // The ggml type of a (logical) HF weight.
  auto out_type = [&](const std::string& name, const Tensor& t) -> uint32_t {
    if (t.dtype == DType::MXFP4) return ggml_type::MXFP4;
    if (t.ndim == 1) return ggml_type::F32;  // norms and biases, as llama.cpp's converter
    switch (type) {
      case GgufOutType::F32: return ggml_type::F32;
      case GgufOutType::F16: return ggml_type::F16;
      case GgufOutType::BF16: return ggml_type::BF16;
      case GgufOutType::MXFP4: break;
    }
    const std::string prefix = name.substr(0, name.size() - 7);
    bool linear = name.ends_with(".weight") && !name.ends_with("embed_tokens.weight") && t.dim(-1) % 32 == 0;
    for (const auto& e : excludes) linear = linear && !exclude_matches(e, prefix);
    return linear ? ggml_type::MXFP4 : ggml_of(t.dtype);
  };
  auto add = [&](const std::string& gname, std::vector<Tensor> parts, uint32_t gt, RowOrder order) {
    std::vector<int64_t> dims;
    const Tensor& t0 = parts[0];
    for (int i = t0.ndim - 1; i >= 0; --i) dims.push_back(t0.dim(i));
    if (parts.size() > 1) dims.push_back(int64_t(parts.size()));
    w.add_tensor(gname, gt, dims, [parts = std::move(parts), order, gt](std::vector<uint8_t>& b) {
      produce(parts, order, gt, b);
    });
    ++rep.tensors;
    rep.mxfp4 += gt == ggml_type::MXFP4;
  };

  std::map<std::string, int> experts_done;  // "layer.proj" -> count, to check completeness
  auto dropped = [&](const std::string& name) {  // MTP layers llama.cpp cannot take (deepseek2); see mtp_layers()
    int layer = -1;
    return std::sscanf(name.c_str(), "model.layers.%d.", &layer) == 1 && layer >= c.num_hidden_layers + mtp_layers(c);
  };
  for (const std::string& name : s.names()) {
    if (name.ends_with(".weight_scale")) continue;  // goes with its .weight
    if (dropped(name)) continue;
    if (auto ex = gguf_names::parse_hf_expert(name)) {
      if (ex->expert != 0) continue;  // the whole stack is written at expert 0
      std::vector<Tensor> parts;
      for (int e = 0; e < c.moe.n_routed_experts; ++e) {
        const std::string en = gguf_names::hf_expert(ex->layer, e, ex->proj);
        if (!s.contains(en)) fail("convert: {} is missing (experts must be complete)", en);
        parts.push_back(logical(s, en));
      }
      const uint32_t gt = out_type(name, parts[0]);
      for (const Tensor& p : parts)
        if (out_type(name, p) != gt || p.dims() != parts[0].dims())
          fail("convert: the experts of layer {} {}_proj differ in type or shape", ex->layer, ex->proj);
      add(gguf_names::gguf_experts(ex->layer, ex->proj), std::move(parts), gt, RowOrder{});
      continue;
    }
    const auto gname = gguf_names::to_gguf(name, c.arch);
    if (!gname) fail("convert: tensor {} has no GGUF name for {}", name, c.architecture);
    const Tensor t = logical(s, name);
    const int64_t heads = gguf_names::llama_permuted_heads(name, c);
    MX_CHECK(!heads || RowOrder::llama_permutable(t.dims(), heads),
             "convert: {} {} does not split into {} heads of an even size (llama.cpp's Q/K row order)", name,
             t.shape_str(), heads);
    const RowOrder order = heads ? RowOrder::llama_permute(t.dim(0), heads) : RowOrder{};
    add(*gname, {t}, out_type(name, t), order);
  }
  if (c.arch == Arch::Llama && c.rope_scaling.type == "llama3") {
    auto f = std::make_shared<std::vector<float>>(llama3_rope_factors(c));
    w.add_tensor("rope_freqs.weight", ggml_type::F32, {int64_t(f->size())}, [f](std::vector<uint8_t>& b) {
      const uint8_t* p = reinterpret_cast<const uint8_t*>(f->data());
      b.insert(b.end(), p, p + f->size() * 4);
    });
    ++rep.tensors;
  }
  w.write(out);
  rep.bytes = fs::file_size(out);
  return rep;
}

}  // namespace mx
