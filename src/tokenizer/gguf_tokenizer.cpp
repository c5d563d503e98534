// The tokenizer of a GGUF file, from its tokenizer.ggml.* metadata, with
// llama.cpp's defaults and per-model fix-ups where the file leaves them out.
#include <algorithm>
#include <cctype>
#include <memory>

#include <fmt/format.h>

#include "core/error.h"
#include "formats/gguf.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/wordpiece_tokenizer.h"

namespace mx {

using namespace tokenizer_impl;

namespace {

std::vector<std::pair<std::string, std::string>> split_merges(const std::vector<std::string_view>& m) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(m.size());
  for (std::string_view s : m) {
    size_t sp = s.find(' ', 1);
    if (sp == std::string_view::npos) out.emplace_back(std::string(), std::string());  // never matches
    else out.emplace_back(std::string(s.substr(0, sp)), std::string(s.substr(sp + 1)));
  }
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_gguf(const GgufFile& g) {
  const std::string& path = g.path();
  const std::string model = g.get_string("tokenizer.ggml.model");
  const std::string pre = g.get_string_or("tokenizer.ggml.pre", "");

  std::unique_ptr<BaseTokenizer> tok;
  BpeTokenizer* bpe = nullptr;
  SpmTokenizer* spm = nullptr;
  WpmTokenizer* wpm = nullptr;
  std::optional<GgufPreInfo> pre_info;
  if (model == "gpt2") {
    pre_info = gguf_pre_tokenizer(pre);
    if (!pre_info)
      fail("{}: tokenizer.ggml.pre '{}' is not supported (byte-level BPE pre-tokenizers: gpt-2 family, "
           "starcoder/refact family, llama3 family, qwen2 family, deepseek-coder, deepseek-v3, falcon, default)",
           path, pre);
    if (!g.has("tokenizer.ggml.merges")) fail("{}: gpt2 tokenizer without tokenizer.ggml.merges", path);
    auto b = std::make_unique<BpeTokenizer>();
    bpe = b.get();
    tok = std::move(b);
  } else if (model == "llama") {
    auto s = std::make_unique<SpmTokenizer>();
    spm = s.get();
    tok = std::move(s);
  } else if (model == "bert") {
    auto w = std::make_unique<WpmTokenizer>();
    wpm = w.get();
    tok = std::move(w);
  } else {
    fail("{}: tokenizer.ggml.model '{}' is not supported (supported: gpt2, llama, bert)", path, model);
  }
  tok->model = model;
  tok->pre = pre;

  // vocabulary
  const auto& texts = g.get_string_array("tokenizer.ggml.tokens");
  const size_t n = texts.size();
  if (n == 0) fail("{}: tokenizer.ggml.tokens is empty", path);
  if (n > size_t(INT32_MAX)) fail("{}: tokenizer.ggml.tokens has {} entries, too many", path, n);
  Vocab& v = tok->v_;
  v.resize(n);
  for (size_t i = 0; i < n; ++i)
    v.text[i] = texts[i].empty() ? fmt::format("[EMPTY_{}]", i) : std::string(texts[i]);
  if (g.has("tokenizer.ggml.scores")) {
    std::vector<float> sc = g.get_f32_array("tokenizer.ggml.scores");
    if (sc.size() != n) fail("{}: tokenizer.ggml.scores has {} entries for {} tokens", path, sc.size(), n);
    std::copy(sc.begin(), sc.begin() + long(n), v.score.begin());
  }
  if (g.has("tokenizer.ggml.token_type")) {
    std::vector<int32_t> ty = g.get_i32_array("tokenizer.ggml.token_type");
    if (ty.size() != n) fail("{}: tokenizer.ggml.token_type has {} entries for {} tokens", path, ty.size(), n);
    for (size_t i = 0; i < n; ++i)
      v.type[i] = (ty[i] >= 0 && ty[i] <= 6) ? TokenType(ty[i]) : TokenType::Undefined;
  }
  for (size_t i = 0; i < n; ++i) v.index(int32_t(i));

  // family defaults (llama.cpp), then the file's keys
  if (spm) {
    tok->bos_id = 1, tok->eos_id = 2, tok->unk_id = 0;
    tok->add_bos = true;
    spm->add_space_prefix = g.get_bool_or("tokenizer.ggml.add_space_prefix", true);
  } else if (wpm) {
    tok->bos_id = 101, tok->unk_id = 100, tok->sep_id = 102, tok->pad_id = 0;
    tok->add_bos = true;
    wpm->lowercase = g.get_bool_or("tokenizer.ggml.normalizer.lowercase", true);
    wpm->strip_accents = g.get_bool_or("tokenizer.ggml.normalizer.strip_accents", wpm->lowercase);
  } else {
    tok->add_bos = pre_info->add_bos;
  }
  auto id_key = [&](const char* key, int32_t& id) {
    if (const GgufValue* val = g.find(key))
      id = tok->valid_or(val->as_i64(fmt::format("{}: metadata '{}'", path, key)), id);
  };
  id_key("tokenizer.ggml.bos_token_id", tok->bos_id);
  id_key("tokenizer.ggml.eos_token_id", tok->eos_id);
  id_key("tokenizer.ggml.eot_token_id", tok->eot_id);
  id_key("tokenizer.ggml.eom_token_id", tok->eom_id);
  id_key("tokenizer.ggml.unknown_token_id", tok->unk_id);
  id_key("tokenizer.ggml.seperator_token_id", tok->sep_id);
  id_key("tokenizer.ggml.padding_token_id", tok->pad_id);
  tok->add_bos = g.get_bool_or("tokenizer.ggml.add_bos_token", tok->add_bos);
  tok->add_eos = g.get_bool_or("tokenizer.ggml.add_eos_token", tok->add_eos);
  if (!wpm && tok->add_bos && tok->bos_id < 0) fail("{}: the vocabulary adds BOS but has no bos_token_id", path);
  if (!wpm && tok->add_eos && tok->eos_id < 0) fail("{}: the vocabulary adds EOS but has no eos_token_id", path);

  tok->promote_named_controls();

  if (bpe) {
    BpeTokenizer::Options o;
    o.steps = pre_info->steps;
    o.ignore_merges = pre_info->ignore_merges;
    bpe->build(std::move(o), split_merges(g.get_string_array("tokenizer.ggml.merges")));
  } else if (spm) {
    spm->build();
  }
  tok->finish();

  // Phi-3: llama.cpp strips whitespace after its special tokens (by model name).
  std::string name = g.get_string_or("general.name", "");
  std::transform(name.begin(), name.end(), name.begin(), [](char c) { return char(std::tolower(uint8_t(c))); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (size_t i = 0; i < v.size(); ++i) {
      TokenType t = v.type[i];
      if (t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) v.strip[i] |= kRstrip;
    }
    if (int32_t id = v.find("</s>"); id >= 0) v.strip[size_t(id)] |= kRstrip;
    for (const char* t : {"<unk>", "<s>", "<|endoftext|>"})
      if (int32_t id = v.find(t); id >= 0) v.strip[size_t(id)] &= uint8_t(~kRstrip);
  }
  return tok;
}

}  // namespace mx
