// The tokenizer of a Hugging Face tokenizer.json (byte-level BPE only) and the
// tokenizer_config.json beside it. What the file asks for that byte-level BPE
// cannot do is an error naming it, never a silent approximation.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/json_fields.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace mx {

using namespace tokenizer_impl;

namespace {

// A tokenizer.json nests a few levels; the pre_tokenizer, decoder and post_processor
// Sequences are read recursively, and 100,000 nested ones overflowed the stack.
constexpr int kMaxTokenizerJsonDepth = 64;

json read_json(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail("cannot open {}", p.string());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!json_depth_at_most(text, kMaxTokenizerJsonDepth))
    fail("{}: nests arrays and objects more than {} deep", p.string(), kMaxTokenizerJsonDepth);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", p.string(), e.what());
  }
}

std::string type_of(const json& j) { return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : ""; }

// Flattens the pre_tokenizer tree into split steps.
void parse_pre(const json& j, const std::string& where, std::vector<PreSplit>& steps, bool& byte_level,
               bool& prefix_space) {
  if (j.is_null()) return;
  const std::string t = type_of(j);
  if (t == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      fail("{}: Sequence pre_tokenizer without a 'pretokenizers' array", where);
    for (const auto& p : j["pretokenizers"]) parse_pre(p, where, steps, byte_level, prefix_space);
  } else if (t == "ByteLevel") {
    if (byte_level) fail("{}: more than one ByteLevel pre_tokenizer", where);
    byte_level = true;
    const JsonFields f(j, where + ": ByteLevel pre_tokenizer");
    if (f.opt_bool("add_prefix_space", false)) {
      if (!steps.empty())
        fail("{}: ByteLevel add_prefix_space after other pre-tokenizers is not supported", where);
      prefix_space = true;
    }
    if (f.opt_bool("use_regex", true)) steps.push_back(PreSplit::Gpt2);
  } else if (t == "Split") {
    if (byte_level) fail("{}: a Split pre_tokenizer after ByteLevel is not supported", where);
    const JsonFields f(j, where + ": Split pre_tokenizer");
    const json& pat = f.opt_any("pattern");
    if (!pat.is_object() || !pat.contains("Regex") || !pat["Regex"].is_string())
      fail("{}: Split pre_tokenizer needs a {{\"Regex\": ...}} pattern (got {})", where, pat.dump());
    const std::string re = pat["Regex"].get<std::string>();
    const std::string behavior = f.opt_str("behavior", "Isolated");
    if (behavior != "Isolated") fail("{}: Split behavior '{}' is not supported (only Isolated)", where, behavior);
    if (f.opt_bool("invert", false)) fail("{}: inverted Split is not supported", where);
    auto s = pre_split_for_regex(re);
    if (!s)
      fail("{}: Split regex '{}' is not one of the pre-tokenizers mxserve implements (GPT-2, Llama-3, Qwen2, "
           "DeepSeek-Coder, DeepSeek-V3 and digit splits)",
           where, re);
    steps.push_back(*s);
  } else if (t == "Digits") {
    if (byte_level) fail("{}: a Digits pre_tokenizer after ByteLevel is not supported", where);
    steps.push_back(JsonFields(j, where + ": Digits pre_tokenizer").opt_bool("individual_digits", false) ? PreSplit::DigitEach : PreSplit::DigitRun);
  } else {
    fail("{}: pre_tokenizer type '{}' is not supported", where, t.empty() ? j.dump() : t);
  }
}

void check_decoder(const json& j, const std::string& where) {
  if (j.is_null()) return;
  const std::string t = type_of(j);
  if (t == "ByteLevel") return;
  if (t == "Sequence" && j.contains("decoders") && j["decoders"].is_array()) {
    for (const auto& d : j["decoders"]) check_decoder(d, where);
    return;
  }
  fail("{}: decoder type '{}' is not supported (byte-level BPE needs the ByteLevel decoder)", where,
       t.empty() ? j.dump() : t);
}

std::string token_content(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return "";
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_hf(const std::string& tokenizer_json_path) {
  const fs::path path(tokenizer_json_path);
  const json j = read_json(path);
  const fs::path cfg_path = path.parent_path() / "tokenizer_config.json";
  const json cfg = fs::exists(cfg_path) ? read_json(cfg_path) : json();
  return parse_tokenizer_hf(j, cfg, path.string());
}

std::unique_ptr<Tokenizer> parse_tokenizer_hf(const json& j, const json& cfg, const std::string& where) {
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) fail("{}: no 'model' object", where);
  const json& m = j["model"];
  const JsonFields top(j, where), model(m, where + ": model");
  const std::string mtype = type_of(m);
  if (!(mtype == "BPE" || (mtype.empty() && m.contains("merges"))))
    fail("{}: model type '{}' is not supported (only byte-level BPE)", where, mtype);
  if (model.opt_bool("byte_fallback", false)) fail("{}: BPE byte_fallback is not supported (only byte-level BPE)", where);
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && m[k].is_string() && !m[k].get<std::string>().empty())
      fail("{}: BPE {} '{}' is not supported", where, k, m[k].get<std::string>());
  if (m.contains("dropout") && m["dropout"].is_number() && m["dropout"].get<double>() != 0.0)
    fail("{}: BPE dropout is not supported", where);
  if (!m.contains("vocab") || !m["vocab"].is_object()) fail("{}: model.vocab is not an object", where);
  if (!m.contains("merges") || !m["merges"].is_array()) fail("{}: model.merges is not an array", where);

  auto tok = std::make_unique<BpeTokenizer>();
  tok->model = "gpt2";

  // vocabulary: model.vocab plus added_tokens (which may extend it)
  struct Added {
    int64_t id;
    std::string content;
    bool special, lstrip, rstrip;
  };
  std::vector<Added> added;
  if (j.contains("added_tokens") && !j["added_tokens"].is_null() && !j["added_tokens"].is_array())
    fail("{}: added_tokens is not an array", where);
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const auto& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        fail("{}: added_tokens entry {} needs an integer 'id' and a string 'content'", where, a.dump());
      const JsonFields f(a, where + ": added_tokens entry");
      added.push_back({a["id"].get<int64_t>(), a["content"].get<std::string>(), f.opt_bool("special", false),
                       f.opt_bool("lstrip", false), f.opt_bool("rstrip", false)});
    }
  }
  int64_t max_id = -1;
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      fail("{}: vocab entry '{}' has id {}, not a non-negative integer", where, it.key(), it->dump());
    max_id = std::max(max_id, it->get<int64_t>());
  }
  for (const auto& a : added) {
    if (a.id < 0) fail("{}: added token '{}' has negative id {}", where, a.content, a.id);
    max_id = std::max(max_id, a.id);
  }
  if (max_id < 0) fail("{}: empty vocabulary", where);
  if (max_id >= int64_t(INT32_MAX) || max_id > int64_t(m["vocab"].size() + added.size()) * 4 + 1024)
    fail("{}: token id {} is implausibly large for {} tokens", where, max_id, m["vocab"].size() + added.size());
  Vocab& v = tok->v_;
  v.resize(size_t(max_id + 1));
  std::vector<bool> present(v.size(), false);
  // One text per id: a second would replace the first silently (its text then never encodes).
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    size_t id = size_t(it->get<int64_t>());
    if (present[id]) fail("{}: vocab entries '{}' and '{}' share id {}", where, v.text[id], it.key(), id);
    v.text[id] = it.key();
    present[id] = true;
  }
  for (const auto& a : added) {
    size_t id = size_t(a.id);
    if (present[id] && v.text[id] != a.content)
      fail("{}: added token '{}' has id {}, which is '{}'", where, a.content, id, v.text[id]);
    v.text[id] = a.content;
    v.type[id] = a.special ? TokenType::Control : TokenType::UserDefined;
    v.strip[id] = uint8_t((a.lstrip ? kLstrip : 0) | (a.rstrip ? kRstrip : 0));
    present[id] = true;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    if (!present[i] || v.text[i].empty()) {
      v.type[i] = TokenType::Unused;  // a hole in the id space: never produced
      continue;
    }
    v.index(int32_t(i));
  }

  // merges: "a b" strings or ["a", "b"] pairs
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(m["merges"].size());
  for (const auto& e : m["merges"]) {
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) fail("{}: merge '{}' is not two space-separated tokens", where, s);
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      fail("{}: merge {} is neither \"a b\" nor [\"a\", \"b\"]", where, e.dump());
    }
  }

  BpeTokenizer::Options o;
  o.ignore_merges = model.opt_bool("ignore_merges", false);
  // normalizer
  const json& norm = top.opt_any("normalizer");
  if (!norm.is_null()) {
    const std::string t = type_of(norm);
    if (t == "NFC") o.nfc = true;
    else if (!(t == "Sequence" && norm.contains("normalizers") && norm["normalizers"].empty()))
      fail("{}: normalizer '{}' is not supported (only NFC or none)", where, t.empty() ? norm.dump() : t);
  }
  bool byte_level = false;
  parse_pre(top.opt_any("pre_tokenizer"), where, o.steps, byte_level, o.prefix_space);
  if (!byte_level) fail("{}: pre_tokenizer has no ByteLevel step: only byte-level BPE is supported", where);
  check_decoder(top.opt_any("decoder"), where);
  // Byte-level BPE spells any text with the 256 byte tokens: a text holding a byte the vocabulary
  // lacks loses it (Hugging Face tokenizers and llama.cpp drop it too). Said at load, not refused:
  // real vocabularies lack some (GPT-NeoX's the 13 bytes UTF-8 never holds, 0xC0, 0xC1, 0xF5-0xFF,
  // which no text here can contain; bloomz's 0x0B).
  std::string missing;
  int n_missing = 0;
  for (int b = 0; b < 256; ++b)
    if (!(b == 0xC0 || b == 0xC1 || b >= 0xF5) && v.find(byte_table().enc[size_t(b)]) < 0)
      missing += fmt::format("{}{:#04x}", n_missing++ ? " " : "", b);
  if (n_missing)
    std::fprintf(stderr, "warning: %s: the vocabulary has no byte-level token for %d byte(s) (%s): text holding them "
                 "loses them when encoded\n", where.c_str(), n_missing, missing.c_str());

  std::string pre = "hf";
  for (PreSplit s : o.steps) {
    switch (s) {
      case PreSplit::Gpt2: pre += ":gpt2"; break;
      case PreSplit::Llama3: pre += ":llama3"; break;
      case PreSplit::Qwen2: pre += ":qwen2"; break;
      case PreSplit::Deepseek3: pre += ":deepseek3"; break;
      default: pre += ":split"; break;
    }
  }
  tok->pre = pre;

  // bos/eos: the post-processor's template, then tokenizer_config.json
  auto id_of = [&](const std::string& text) { return v.find(text); };
  const json& post = top.opt_any("post_processor");
  std::function<void(const json&)> scan_post = [&](const json& p) {
    const std::string t = type_of(p);
    if (t == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
      for (const auto& q : p["processors"]) scan_post(q);
    } else if (t == "TemplateProcessing" && p.contains("single") && p["single"].is_array() && !p["single"].empty()) {
      const json& s = p["single"];
      auto special_id = [&](const json& item) -> int32_t {
        if (!item.is_object() || !item.contains("SpecialToken")) return -1;
        return id_of(JsonFields(item["SpecialToken"], where + ": post_processor SpecialToken").opt_str("id", ""));
      };
      if (int32_t id = special_id(s.front()); id >= 0) tok->bos_id = id, tok->add_bos = true;
      if (s.size() > 1)
        if (int32_t id = special_id(s.back()); id >= 0) tok->eos_id = id, tok->add_eos = true;
    } else if ((t == "RobertaProcessing" || t == "BertProcessing") && p.contains("cls") && p.contains("sep")) {
      if (p["cls"].is_array() && !p["cls"].empty() && p["cls"][0].is_string())
        if (int32_t id = id_of(p["cls"][0].get<std::string>()); id >= 0) tok->bos_id = id, tok->add_bos = true;
      if (p["sep"].is_array() && !p["sep"].empty() && p["sep"][0].is_string())
        if (int32_t id = id_of(p["sep"][0].get<std::string>()); id >= 0) tok->eos_id = id, tok->add_eos = true;
    }
  };
  scan_post(post);
  if (cfg.is_object()) {
    if (cfg.contains("bos_token"))
      if (int32_t id = id_of(token_content(cfg["bos_token"])); id >= 0) tok->bos_id = id;
    if (cfg.contains("eos_token"))
      if (int32_t id = id_of(token_content(cfg["eos_token"])); id >= 0) tok->eos_id = id;
    if (cfg.contains("unk_token"))
      if (int32_t id = id_of(token_content(cfg["unk_token"])); id >= 0) tok->unk_id = id;
    if (cfg.contains("pad_token"))
      if (int32_t id = id_of(token_content(cfg["pad_token"])); id >= 0) tok->pad_id = id;
    if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
      tok->add_bos = cfg["add_bos_token"].get<bool>() && tok->bos_id >= 0;
    if (cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean())
      tok->add_eos = cfg["add_eos_token"].get<bool>() && tok->eos_id >= 0;
  }

  tok->build(std::move(o), merges);
  tok->finish();
  return tok;
}

}  // namespace mx
