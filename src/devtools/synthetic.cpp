#include "devtools/synthetic.h"

#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "core/tensor.h"
#include "devtools/bpe_trainer.h"
#include "tokenizer/pretokenize.h"
#include "formats/safetensors.h"
#include "devtools/embedded_chat_templates.h"

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

// ---- tokenizer files (tokenizer.json, tokenizer_config.json, generation_config.json) ----

namespace {

struct SpecialTok {
  const char* text;
  bool special;  // HF "special": control token (false: user-defined, e.g. Qwen's <tool_call>)
};

struct TokFamily {
  const char* name;
  std::vector<SpecialTok> specials;  // in id order, right after the learned merges
  std::vector<PreSplit> pre;
  bool nfc = false, ignore_merges = false;
  const char* bos;                   // config.json bos_token_id
  bool bos_in_tokenizer_config;      // tokenizer_config.json names it as bos_token
  bool add_bos;                      // the post-processor prepends it
  const char* eos_token;             // tokenizer_config.json eos_token
  std::vector<const char*> eos;      // config.json eos_token_id
  const char* pad;                   // pad_token, or null
  const char* chat_template;
  const char* tokenizer_class;
};

const TokFamily& tok_family(const std::string& arch) {
  static const std::vector<SpecialTok> qwen25 = {
      {"<|endoftext|>", true}, {"<|im_start|>", true}, {"<|im_end|>", true}, {"<|object_ref_start|>", true},
      {"<|object_ref_end|>", true}, {"<|box_start|>", true}, {"<|box_end|>", true}, {"<|quad_start|>", true},
      {"<|quad_end|>", true}, {"<|vision_start|>", true}, {"<|vision_end|>", true}, {"<|vision_pad|>", true},
      {"<|image_pad|>", true}, {"<|video_pad|>", true}, {"<tool_call>", false}, {"</tool_call>", false},
      {"<|fim_prefix|>", false}, {"<|fim_middle|>", false}, {"<|fim_suffix|>", false}, {"<|fim_pad|>", false},
      {"<|repo_name|>", false}, {"<|file_sep|>", false},
  };
  static const std::vector<SpecialTok> qwen3 = [] {
    std::vector<SpecialTok> v = qwen25;
    for (const char* t : {"<tool_response>", "</tool_response>", "<think>", "</think>"}) v.push_back({t, false});
    return v;
  }();
  static const TokFamily llama{
      "Llama-3.1",
      {{"<|begin_of_text|>", true}, {"<|end_of_text|>", true}, {"<|reserved_special_token_0|>", true},
       {"<|reserved_special_token_1|>", true}, {"<|finetune_right_pad_id|>", true},
       {"<|reserved_special_token_2|>", true}, {"<|start_header_id|>", true}, {"<|end_header_id|>", true},
       {"<|eom_id|>", true}, {"<|eot_id|>", true}, {"<|python_tag|>", true}},
      {PreSplit::Llama3}, false, true,
      "<|begin_of_text|>", true, true, "<|eot_id|>", {"<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"}, nullptr,
      kLlama3Template, "PreTrainedTokenizerFast"};
  static const TokFamily qwen2{
      "Qwen2.5", qwen25, {PreSplit::Qwen2}, true, false,
      "<|endoftext|>", false, false, "<|im_end|>", {"<|im_end|>", "<|endoftext|>"}, "<|endoftext|>",
      kQwen25Template, "Qwen2Tokenizer"};
  static const TokFamily qwen3_f{
      "Qwen3", qwen3, {PreSplit::Qwen2}, true, false,
      "<|endoftext|>", false, false, "<|im_end|>", {"<|im_end|>", "<|endoftext|>"}, "<|endoftext|>",
      kQwen3Template, "Qwen2Tokenizer"};
  static const TokFamily glm{
      "GLM-4.5",
      {{"<|endoftext|>", true}, {"[MASK]", true}, {"[gMASK]", true}, {"[sMASK]", true}, {"<sop>", true},
       {"<eop>", true}, {"<|system|>", true}, {"<|user|>", true}, {"<|assistant|>", true},
       {"<|observation|>", true}, {"<|begin_of_image|>", true}, {"<|end_of_image|>", true},
       {"<|begin_of_video|>", true}, {"<|end_of_video|>", true}, {"<|begin_of_audio|>", true},
       {"<|end_of_audio|>", true}, {"<|begin_of_transcription|>", true}, {"<|end_of_transcription|>", true},
       {"<|code_prefix|>", true}, {"<|code_middle|>", true}, {"<|code_suffix|>", true}, {"<think>", true},
       {"</think>", true}, {"<tool_call>", true}, {"</tool_call>", true}, {"<tool_response>", true},
       {"</tool_response>", true}, {"<arg_key>", true}, {"</arg_key>", true}, {"<arg_value>", true},
       {"</arg_value>", true}, {"/nothink", true}},
      {PreSplit::Llama3}, false, false,
      "[gMASK]", false, false, "<|endoftext|>", {"<|endoftext|>", "<|user|>", "<|observation|>"}, "<|endoftext|>",
      kGlm45Template, "PreTrainedTokenizerFast"};
  static const TokFamily deepseek{
      "DeepSeek-V3.1",
      {{"<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", true},
       {"<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", true},
       {"<\xef\xbd\x9c\xe2\x96\x81pad\xe2\x96\x81\xef\xbd\x9c>", true},
       {"<\xef\xbd\x9cUser\xef\xbd\x9c>", false}, {"<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>", false},
       {"<think>", false}, {"</think>", false},
       {"<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", false},
       {"<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", false},
       {"<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", false},
       {"<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>", false},
       {"<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>", false},
       {"<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>", false},
       {"<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>", false},
       {"<\xef\xbd\x9ctool\xe2\x96\x81outputs\xe2\x96\x81" "begin\xef\xbd\x9c>", false},
       {"<\xef\xbd\x9ctool\xe2\x96\x81outputs\xe2\x96\x81" "end\xef\xbd\x9c>", false},
       {"<\xef\xbd\x9ctool\xe2\x96\x81output\xe2\x96\x81" "begin\xef\xbd\x9c>", false},
       {"<\xef\xbd\x9ctool\xe2\x96\x81output\xe2\x96\x81" "end\xef\xbd\x9c>", false},
       {"<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>", false}},
      {PreSplit::Digits1to3, PreSplit::CjkDeepseek3, PreSplit::Deepseek3}, false, false,
      "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", true, true,
      "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
      {"<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"},
      "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
      kDeepseekV31Template, "LlamaTokenizerFast"};
  if (arch == "llama") return llama;
  if (arch == "qwen2") return qwen2;
  if (arch == "qwen3" || arch == "qwen3_moe") return qwen3_f;
  if (arch == "glm4_moe") return glm;
  if (arch == "deepseek_v3") return deepseek;
  fail("make-test-model: no tokenizer family for arch '{}'", arch);
}

std::string jstr(const std::string& s) { return json(s).dump(); }

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  MX_CHECK(bool(out), "cannot write {}", p.string());
}

}  // namespace

SyntheticTokenizerInfo write_synthetic_tokenizer(const std::string& dir, const std::string& arch, int vocab_size,
                                                 int max_length) {
  const TokFamily& f = tok_family(arch);
  const size_t V = size_t(vocab_size), S = f.specials.size();
  MX_CHECK(vocab_size > 0 && V >= 256 + S, "make-test-model: vocab_size {} is too small for the {} tokenizer ({} "
           "byte tokens + {} special tokens)", vocab_size, f.name, 256, S);

  // Merges learned from the corpus with the family's own pre-tokenizer, as many
  // as fit below the special tokens; the corpus supports about two thousand.
  BpeTrainOptions o;
  o.pre = f.pre;
  o.nfc = f.nfc;
  o.max_tokens = V - S;
  BpeVocab bpe = train_bpe(bpe_builtin_corpus(), o);
  const size_t learned = bpe.tokens.size(), reserved = V - S - learned;

  // Filler ids pad the vocabulary after the learned tokens: ordinary tokens
  // with visible text (" tok0", " tok1", ... in byte-level spelling), never
  // produced by a merge, so that a random-weight model, which samples them
  // almost always, returns text and streams as a real model does. The family's
  // special tokens follow at the top.
  std::vector<std::string> vocab = bpe.tokens;
  for (size_t i = 0; i < reserved; ++i) vocab.push_back(fmt::format("\xc4\xa0tok{}", i));  // "Ġ" = ' '
  const size_t first_added = vocab.size();
  std::vector<std::pair<std::string, bool>> added;  // ids first_added, first_added + 1, ...
  for (const SpecialTok& t : f.specials) added.emplace_back(t.text, t.special);
  std::unordered_map<std::string, int32_t> ids;
  for (size_t i = 0; i < vocab.size(); ++i) {
    bool fresh = ids.emplace(vocab[i], int32_t(i)).second;
    MX_CHECK(fresh, "make-test-model: token '{}' is in the vocabulary twice", vocab[i]);
  }
  for (size_t i = 0; i < added.size(); ++i) {
    bool fresh = ids.emplace(added[i].first, int32_t(first_added + i)).second;
    MX_CHECK(fresh, "make-test-model: token '{}' is in the vocabulary twice", added[i].first);
  }
  auto id = [&](const char* t) { return ids.at(t); };

  // tokenizer.json, written by hand: vocabularies of 150k tokens are too big
  // for a tree of json objects.
  json pre_steps = json::array();
  for (PreSplit s : f.pre)
    pre_steps.push_back({{"type", "Split"}, {"pattern", {{"Regex", pre_split_regex(s)}}}, {"behavior", "Isolated"},
                         {"invert", false}});
  pre_steps.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}});
  json post = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
  if (f.add_bos) {
    const std::string b = f.bos;
    post = {{"type", "TemplateProcessing"},
            {"single", {{{"SpecialToken", {{"id", b}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair",
             {{{"SpecialToken", {{"id", b}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
              {{"SpecialToken", {{"id", b}, {"type_id", 1}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
            {"special_tokens", {{b, {{"id", b}, {"ids", {id(f.bos)}}, {"tokens", {b}}}}}}};
  }
  std::string tj;
  tj.reserve(64 * V + 4096);
  tj += "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [";
  for (size_t i = 0; i < added.size(); ++i)
    tj += fmt::format("{}\n    {{\"id\": {}, \"content\": {}, \"single_word\": false, \"lstrip\": false, \"rstrip\": "
                      "false, \"normalized\": false, \"special\": {}}}",
                      i ? "," : "", first_added + i, jstr(added[i].first), added[i].second ? "true" : "false");
  tj += "\n  ],\n  \"normalizer\": ";
  tj += f.nfc ? R"({"type": "NFC"})" : "null";
  tj += ",\n  \"pre_tokenizer\": " + json({{"type", "Sequence"}, {"pretokenizers", pre_steps}}).dump();
  tj += ",\n  \"post_processor\": " + post.dump();
  tj += ",\n  \"decoder\": " +
        json({{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}).dump();
  tj += fmt::format(",\n  \"model\": {{\n    \"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
                    "\"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, \"fuse_unk\": false, "
                    "\"byte_fallback\": false, \"ignore_merges\": {},\n    \"vocab\": {{",
                    f.ignore_merges ? "true" : "false");
  for (size_t i = 0; i < vocab.size(); ++i) tj += fmt::format("{}\n      {}: {}", i ? "," : "", jstr(vocab[i]), i);
  tj += "\n    },\n    \"merges\": [";
  for (size_t i = 0; i < bpe.merges.size(); ++i)
    tj += fmt::format("{}\n      [{}, {}]", i ? "," : "", jstr(bpe.merges[i].first), jstr(bpe.merges[i].second));
  tj += "\n    ]\n  }\n}\n";

  SyntheticTokenizerInfo info;
  info.bos_id = id(f.bos);
  for (const char* e : f.eos) info.eos_ids.push_back(id(e));
  info.pad_id = f.pad ? id(f.pad) : -1;
  info.learned_merges = bpe.merges.size();
  info.reserved = reserved;

  // tokenizer_config.json: what transformers' AutoTokenizer reads beside it.
  json tc = json::object();
  if (f.add_bos) {
    tc["add_bos_token"] = true;
    tc["add_eos_token"] = false;
  }
  tc["bos_token"] = f.bos_in_tokenizer_config ? json(f.bos) : json(nullptr);
  tc["chat_template"] = f.chat_template;
  tc["clean_up_tokenization_spaces"] = false;
  tc["eos_token"] = f.eos_token;
  tc["model_max_length"] = max_length;
  tc["pad_token"] = f.pad ? json(f.pad) : json(nullptr);
  tc["tokenizer_class"] = f.tokenizer_class;
  tc["unk_token"] = nullptr;

  json gen = {{"bos_token_id", info.bos_id}, {"do_sample", false}};
  gen["eos_token_id"] = info.eos_ids.size() == 1 ? json(info.eos_ids[0]) : json(info.eos_ids);
  if (info.pad_id >= 0) gen["pad_token_id"] = info.pad_id;

  fs::create_directories(dir);
  write_text(fs::path(dir) / "tokenizer.json", tj);
  write_text(fs::path(dir) / "tokenizer_config.json", tc.dump(2) + "\n");
  write_text(fs::path(dir) / "generation_config.json", gen.dump(2) + "\n");
  return info;
}

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
  const SyntheticTokenizerInfo tok = write_synthetic_tokenizer(dir, arch, s.vocab, s.ctx);

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
      {"bos_token_id", tok.bos_id},
      {"eos_token_id", tok.eos_ids.size() == 1 ? json(tok.eos_ids[0]) : json(tok.eos_ids)},
      {"torch_dtype", spec.dtype == DType::F32 ? "float32" : "bfloat16"},
  };
  if (tok.pad_id >= 0) cfg["pad_token_id"] = tok.pad_id;
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
