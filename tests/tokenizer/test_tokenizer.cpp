#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/model_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"
#include "core/unicode.h"
#include "test_util.h"

using namespace mx;
using nlohmann::json;

namespace {

namespace fs = std::filesystem;


std::string vocab_path(const std::string& name) {
  return (mxtest::tokenizer_vectors_dir() / ("ggml-vocab-" + name + ".gguf")).string();
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// llama.cpp's test-tokenizer-0 format: strings separated by "\n__ggml_vocab_test__\n",
// one line of expected ids per string.
std::vector<Case> read_cases(const std::string& name) {
  const std::string raw = mxtest::slurp(vocab_path(name) + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  const auto lines = mxtest::read_lines(vocab_path(name) + ".out");
  EXPECT_EQ(inputs.size(), lines.size()) << name;
  std::vector<Case> cases;
  for (size_t i = 0; i < inputs.size() && i < lines.size(); ++i) {
    Case c{inputs[i], {}};
    std::istringstream ss(lines[i]);
    for (int32_t id; ss >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    if (!s.empty()) s += ' ';
    s += std::to_string(id);
  }
  return s;
}

std::unique_ptr<Tokenizer> load(const std::string& name) {
  GgufFile g(vocab_path(name));
  return load_tokenizer_gguf(g);
}

const char* const kVocabs[] = {"bert-bge", "deepseek-coder", "gpt-2", "llama-spm", "mpt", "phi-3", "refact"};
const char* const kReversible[] = {"deepseek-coder", "gpt-2", "llama-spm", "mpt", "phi-3", "refact"};

// The bytes of a GGUF with one string metadata value replaced (vocab files have
// no tensors, so shifting the rest is harmless).
std::string with_string(const std::string& gguf, const std::string& key, const std::string& value) {
  std::string needle;
  uint64_t n = key.size();
  needle.append(reinterpret_cast<const char*>(&n), 8);
  needle += key;
  uint32_t t = uint32_t(GgufType::STRING);
  needle.append(reinterpret_cast<const char*>(&t), 4);
  size_t at = gguf.find(needle);
  if (at == std::string::npos) throw std::runtime_error("key not found: " + key);
  size_t vpos = at + needle.size();
  uint64_t old_len;
  std::memcpy(&old_len, gguf.data() + vpos, 8);
  std::string nv;
  uint64_t len = value.size();
  nv.append(reinterpret_cast<const char*>(&len), 8);
  nv += value;
  return gguf.substr(0, vpos) + nv + gguf.substr(vpos + 8 + old_len);
}

std::unique_ptr<Tokenizer> load_bytes(const mxtest::TempDir& d, const std::string& bytes, const std::string& name) {
  std::string p = d / name;
  mxtest::spit(p, bytes);
  GgufFile g(p);
  return load_tokenizer_gguf(g);
}

// A tokenizer.json holding the gpt-2 vocabulary and merges with the given
// pre-tokenizer (and optional normalizer / post-processor).
json hf_from_gpt2(const json& pre_tokenizer, bool merges_as_pairs = false) {
  static const auto [vocab, merge_strings, merge_pairs] = [] {
    GgufFile g(vocab_path("gpt-2"));
    const auto& toks = g.get_string_array("tokenizer.ggml.tokens");
    json v = json::object(), ms = json::array(), mp = json::array();
    for (size_t i = 0; i + 1 < toks.size(); ++i) v[std::string(toks[i])] = i;  // all but <|endoftext|>
    for (auto s : g.get_string_array("tokenizer.ggml.merges")) {
      size_t sp = s.find(' ', 1);
      ms.push_back(std::string(s));
      mp.push_back({std::string(s.substr(0, sp)), std::string(s.substr(sp + 1))});
    }
    return std::make_tuple(v, ms, mp);
  }();
  const json& m = merges_as_pairs ? merge_pairs : merge_strings;
  json j;
  j["version"] = "1.0";
  j["added_tokens"] = json::array({{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true},
                                    {"lstrip", false}, {"rstrip", false}, {"normalized", false}}});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = pre_tokenizer;
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
                {"merges", m}};
  return j;
}

json split_then_bytelevel(const char* regex) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
}

std::unique_ptr<Tokenizer> load_json(const mxtest::TempDir& d, const json& j, const std::string& name = "tokenizer.json") {
  std::string p = d / name;
  mxtest::spit(p, j.dump());
  return load_tokenizer_hf(p);
}

// The same layout with a three-token vocabulary, for configuration errors.
json tiny_hf(const json& pre_tokenizer) {
  json j = {{"added_tokens", json::array()}, {"normalizer", nullptr}, {"pre_tokenizer", pre_tokenizer},
            {"post_processor", nullptr}, {"decoder", {{"type", "ByteLevel"}}}};
  j["model"] = {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}};
  for (const std::string& c : tokenizer_impl::byte_table().enc)  // every byte-level token, from id 3
    if (!j["model"]["vocab"].contains(c)) j["model"]["vocab"][c] = int(j["model"]["vocab"].size());
  return j;
}

void expect_hf_error(const json& j, std::initializer_list<const char*> fragments) {
  mxtest::TempDir d;
  try {
    load_json(d, j);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const char* f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "message '" << e.what() << "' lacks '" << f << "'";
  }
}

}  // namespace

TEST(Tokenizer, LlamaCppVectorsMatchExactly) {
  for (const char* name : kVocabs) {
    SCOPED_TRACE(name);
    auto tok = load(name);
    const auto cases = read_cases(name);
    ASSERT_EQ(cases.size(), 46u);
    size_t pass = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      std::vector<int32_t> got = tok->encode(cases[i].text, /*add_special=*/false);
      if (got == cases[i].ids) {
        ++pass;
        continue;
      }
      ADD_FAILURE() << name << " string #" << i << " '" << cases[i].text << "'\n  want: " << show(cases[i].ids)
                    << "\n  got:  " << show(got);
    }
    EXPECT_EQ(pass, cases.size()) << name << ": " << pass << "/" << cases.size() << " strings match";
  }
}

TEST(Tokenizer, DecodeInvertsEncode) {
  for (const char* name : kReversible) {
    SCOPED_TRACE(name);
    auto tok = load(name);
    for (const Case& c : read_cases(name)) {
      EXPECT_EQ(tok->decode(tok->encode(c.text, false)), c.text);
      EXPECT_EQ(tok->decode(tok->encode(c.text, true)), c.text);  // BOS decodes to nothing
    }
  }
}

TEST(Tokenizer, VocabularyFacts) {
  auto gpt2 = load("gpt-2");
  EXPECT_EQ(gpt2->model, "gpt2");
  EXPECT_EQ(gpt2->pre, "gpt-2");
  EXPECT_EQ(gpt2->vocab_size, 50257u);
  EXPECT_EQ(gpt2->bos_id, 50256);
  EXPECT_EQ(gpt2->eos_id, 50256);
  EXPECT_FALSE(gpt2->add_bos);
  EXPECT_TRUE(gpt2->is_eog(50256));
  EXPECT_FALSE(gpt2->is_eog(220));
  EXPECT_EQ(gpt2->token_text(220), "\xc4\xa0");  // "Ġ"
  EXPECT_EQ(gpt2->token_piece(220), " ");
  EXPECT_EQ(gpt2->token_type(50256), TokenType::Control);
  EXPECT_EQ(gpt2->token_piece(50256), "");
  EXPECT_EQ(gpt2->token_piece(50256, true), "<|endoftext|>");
  EXPECT_EQ(gpt2->find_token("Hello"), 15496);
  EXPECT_FALSE(gpt2->find_token("no such token").has_value());
  EXPECT_EQ(byte_level_char(' '), "\xc4\xa0");
  EXPECT_EQ(byte_level_char('a'), "a");
  EXPECT_THROW(gpt2->token_text(50257), Error);
  EXPECT_THROW(gpt2->decode(std::vector<int32_t>{-1}), Error);
  // Ids past the tokenizer are a model's padded vocabulary: no text (a server answered 500).
  EXPECT_EQ(gpt2->token_piece(50257), "");
  EXPECT_EQ(gpt2->decode(std::vector<int32_t>{15496, 50300}), "Hello");

  auto spm = load("llama-spm");
  EXPECT_EQ(spm->model, "llama");
  EXPECT_EQ(spm->bos_id, 1);
  EXPECT_EQ(spm->eos_id, 2);
  EXPECT_TRUE(spm->add_bos);
  EXPECT_EQ(spm->encode("Hello world", true), (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_EQ(spm->token_piece(13), "\n");  // <0x0A>
  EXPECT_EQ(spm->token_type(13), TokenType::Byte);

  auto bert = load("bert-bge");
  EXPECT_EQ(bert->model, "bert");
  EXPECT_EQ(bert->encode("Hello world", true), (std::vector<int32_t>{101, 7592, 2088, 102}));
  EXPECT_EQ(bert->decode(bert->encode("Hello world", true)), "hello world");

  auto phi3 = load("phi-3");
  EXPECT_EQ(phi3->eos_id, 32000);
  EXPECT_TRUE(phi3->is_eog(32000));
  EXPECT_TRUE(phi3->is_eog(32007));  // <|end|>

  auto ds = load("deepseek-coder");
  EXPECT_EQ(ds->bos_id, 32013);
  EXPECT_TRUE(ds->add_bos);
  std::vector<int32_t> with_bos = ds->encode("Hello", true);
  ASSERT_FALSE(with_bos.empty());
  EXPECT_EQ(with_bos[0], 32013);
}

TEST(Tokenizer, SpecialTokensInText) {
  auto gpt2 = load("gpt-2");
  // control tokens are text unless parse_special
  std::vector<int32_t> plain = gpt2->encode("a<|endoftext|>b", false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 50256), 0);
  EXPECT_EQ(gpt2->decode(plain), "a<|endoftext|>b");
  std::vector<int32_t> parsed = gpt2->encode("a<|endoftext|>b", false, true);
  ASSERT_EQ(parsed.size(), 3u);
  EXPECT_EQ(parsed[1], 50256);
  EXPECT_EQ(parsed[0], gpt2->encode("a", false)[0]);

  // user-defined tokens are always cut out: MPT's runs of spaces, DeepSeek's single characters
  auto mpt = load("mpt");
  EXPECT_EQ(mpt->encode("   ", false), (std::vector<int32_t>{50275}));
  auto ds = load("deepseek-coder");
  std::vector<int32_t> o = ds->encode("x\xc3\xb5y", false);  // "xõy"
  EXPECT_NE(std::find(o.begin(), o.end(), 32000), o.end());
  // FIM tokens llama.cpp promotes to control by name are only parsed on request
  std::vector<int32_t> fim = ds->encode("<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", false, true);
  EXPECT_EQ(fim, (std::vector<int32_t>{32015}));
  EXPECT_EQ(ds->token_type(32015), TokenType::Control);

  // SentencePiece: text after a special token gets the space prefix again
  auto phi3 = load("phi-3");
  std::vector<int32_t> chat = phi3->encode("<|user|>Hi", false, true);
  ASSERT_GE(chat.size(), 2u);
  EXPECT_EQ(chat[0], 32010);
  EXPECT_EQ(std::vector<int32_t>(chat.begin() + 1, chat.end()), phi3->encode("Hi", false));
}

TEST(Tokenizer, ArbitraryBytesAreTokenized) {
  std::mt19937 rng(11);
  const std::string pool[] = {"a", " ", "\n", "\xc3", "\xa9", "\xe4\xb8\xad", "\xf0\x9f", "\xff", "'s", "7",
                              "<|endoftext|>", "<s>", "[CLS]", "\xe2\x96\x81", "  ", "\x00"};
  for (const char* name : kVocabs) {
    SCOPED_TRACE(name);
    auto tok = load(name);
    for (int i = 0; i < 150; ++i) {
      std::string s;
      for (int k = int(rng() % 12); k > 0; --k) s += pool[rng() % std::size(pool)];
      for (bool special : {false, true}) {
        std::vector<int32_t> ids = tok->encode(s, special, special);
        for (int32_t id : ids) ASSERT_TRUE(id >= 0 && size_t(id) < tok->vocab_size) << id;
        (void)tok->decode(ids);
      }
    }
  }
}

TEST(Tokenizer, HfTokenizerJsonMatchesGgufGpt2) {
  mxtest::TempDir d;
  json j = hf_from_gpt2({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}});
  auto hf = load_json(d, j);
  auto gg = load("gpt-2");
  EXPECT_EQ(hf->vocab_size, gg->vocab_size);
  EXPECT_EQ(hf->pre, "hf:gpt2");
  for (const Case& c : read_cases("gpt-2")) {
    EXPECT_EQ(hf->encode(c.text, false), c.ids) << "'" << c.text << "'";
    EXPECT_EQ(hf->decode(c.ids), c.text);
  }
  EXPECT_EQ(hf->encode("a<|endoftext|>b", false, true), gg->encode("a<|endoftext|>b", false, true));
  EXPECT_EQ(hf->token_type(50256), TokenType::Control);

  // bos/eos from tokenizer_config.json beside tokenizer.json
  mxtest::spit(d / "tokenizer_config.json",
               R"({"bos_token": "<|endoftext|>", "eos_token": {"content": "<|endoftext|>"}, "add_bos_token": true})");
  auto hf2 = load_tokenizer_hf(d / "tokenizer.json");
  EXPECT_EQ(hf2->bos_id, 50256);
  EXPECT_EQ(hf2->eos_id, 50256);
  EXPECT_TRUE(hf2->add_bos);
  EXPECT_EQ(hf2->encode("Hello", true), (std::vector<int32_t>{50256, 15496}));
}

TEST(Tokenizer, HfLlama3AndQwen2PatternsMatchTheGgufPath) {
  const std::string gpt2_bytes = mxtest::slurp(vocab_path("gpt-2"));
  mxtest::TempDir d;
  struct Family {
    const char* gguf_pre;
    const char* regex;
    const char* hf_pre;
  };
  const Family fams[] = {
      {"llama-bpe", pre_split_regex(PreSplit::Llama3), "hf:llama3"},
      {"qwen2", pre_split_regex(PreSplit::Qwen2), "hf:qwen2"},
  };
  for (const Family& f : fams) {
    SCOPED_TRACE(f.gguf_pre);
    auto gg = load_bytes(d, with_string(gpt2_bytes, "tokenizer.ggml.pre", f.gguf_pre), std::string(f.gguf_pre) + ".gguf");
    EXPECT_EQ(gg->pre, f.gguf_pre);
    json j = hf_from_gpt2(split_then_bytelevel(f.regex), /*merges_as_pairs=*/true);
    if (std::string(f.gguf_pre) == "llama-bpe") {
      j["model"]["ignore_merges"] = true;
      j["post_processor"] = {{"type", "TemplateProcessing"},
                             {"single", {{{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}},
                                         {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}};
    } else {
      j["normalizer"] = {{"type", "NFC"}};
    }
    auto hf = load_json(d, j, std::string(f.gguf_pre) + ".json");
    EXPECT_EQ(hf->pre, f.hf_pre);
    EXPECT_EQ(hf->add_bos, gg->add_bos);
    if (gg->add_bos) {
      EXPECT_EQ(hf->bos_id, gg->bos_id);
    }
    for (const Case& c : read_cases("gpt-2")) {
      std::vector<int32_t> a = gg->encode(c.text, true), b = hf->encode(c.text, true);
      EXPECT_EQ(a, b) << "'" << c.text << "'";
      EXPECT_EQ(hf->decode(b), c.text);
    }
  }
  // Qwen2's NFC normalizer: decomposed input tokenizes like the composed form
  json q = hf_from_gpt2(split_then_bytelevel(pre_split_regex(PreSplit::Qwen2)));
  q["normalizer"] = {{"type", "NFC"}};
  auto qwen = load_json(d, q, "nfc.json");
  EXPECT_EQ(qwen->encode("A\xcc\x88pfel", false), qwen->encode("\xc3\x84pfel", false));  // "Ä" decomposed
  // digits: Qwen2 one at a time, Llama-3 up to three
  EXPECT_EQ(qwen->encode("12345", false).size(), 5u);
}

TEST(Tokenizer, HfUnsupportedConfigsAreNamed) {
  json bad_regex = tiny_hf(split_then_bytelevel("\\p{L}+|\\d+"));
  expect_hf_error(bad_regex, {"Split regex '\\p{L}+|\\d+'", "not one of the pre-tokenizers"});
  json no_bl = tiny_hf({{"type", "Whitespace"}});
  expect_hf_error(no_bl, {"pre_tokenizer type 'Whitespace' is not supported"});
  json wp = tiny_hf({{"type", "ByteLevel"}});
  wp["model"]["type"] = "WordPiece";
  expect_hf_error(wp, {"model type 'WordPiece' is not supported"});
  json norm = tiny_hf({{"type", "ByteLevel"}});
  norm["normalizer"] = {{"type", "Lowercase"}};
  expect_hf_error(norm, {"normalizer 'Lowercase' is not supported"});
  json dec = tiny_hf({{"type", "ByteLevel"}});
  dec["decoder"] = {{"type", "Metaspace"}};
  expect_hf_error(dec, {"decoder type 'Metaspace' is not supported"});
  json beh = split_then_bytelevel(pre_split_regex(PreSplit::Qwen2));
  beh["pretokenizers"][0]["behavior"] = "Removed";
  expect_hf_error(tiny_hf(beh), {"Split behavior 'Removed'"});
  mxtest::TempDir d;
  auto tiny = load_json(d, tiny_hf({{"type", "ByteLevel"}, {"use_regex", false}}));
  EXPECT_EQ(tiny->encode("ab", false), (std::vector<int32_t>{2}));
  EXPECT_EQ(tiny->encode("ba", false), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(tiny->encode("c", false), (std::vector<int32_t>{*tiny->find_token("c")}));
  // A byte-level vocabulary without a byte's token drops that byte from any text, as Hugging Face
  // tokenizers and llama.cpp do (real ones lack some: bloomz 0x0B); a warning says so at load.
  json no_c = tiny_hf({{"type", "ByteLevel"}, {"use_regex", false}});
  no_c["model"]["vocab"].erase("c");
  EXPECT_TRUE(load_json(d, no_c, "no_c.json")->encode("c", false).empty());
  // Two texts given one id, or an added token given a vocab entry's id: one of them could never encode.
  json dup = tiny_hf({{"type", "ByteLevel"}, {"use_regex", false}});
  dup["model"]["vocab"]["abab"] = 2;
  expect_hf_error(dup, {"share id 2"});
  json reused = tiny_hf({{"type", "ByteLevel"}, {"use_regex", false}});
  reused["added_tokens"] = {{{"id", 0}, {"content", "<zz>"}}};
  expect_hf_error(reused, {"added token '<zz>' has id 0, which is 'a'"});
  json not_array = tiny_hf({{"type", "ByteLevel"}, {"use_regex", false}});
  not_array["added_tokens"] = {{"id", 0}};
  expect_hf_error(not_array, {"added_tokens is not an array"});
  mxtest::spit(d / "broken.json", "{\"model\": ");
  EXPECT_THROW(load_tokenizer_hf(d / "broken.json"), Error);
  EXPECT_THROW(load_tokenizer_hf(d / "absent.json"), Error);
}

TEST(Tokenizer, GgufUnsupportedIsNamed) {
  const std::string gpt2_bytes = mxtest::slurp(vocab_path("gpt-2"));
  mxtest::TempDir d;
  try {
    load_bytes(d, with_string(gpt2_bytes, "tokenizer.ggml.pre", "tekken"), "a.gguf");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.pre 'tekken' is not supported"), std::string::npos) << e.what();
  }
  try {
    load_bytes(d, with_string(gpt2_bytes, "tokenizer.ggml.model", "rwkv"), "b.gguf");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.model 'rwkv' is not supported"), std::string::npos) << e.what();
  }
}

// Files that loaded and then tokenized wrongly, or crashed: a tokenizer.json nested 100,000 deep
// (its Sequences are read recursively: SIGSEGV), GGUF vocabulary arrays longer than the token list,
// a llama2.c tokenizer cut after a whole token (no count is stored: it parsed, 300 of 512 tokens).
TEST(Tokenizer, MalformedFilesAreErrorsNotAMisreading) {
  mxtest::TempDir d;
  json deep = tiny_hf({{"type", "ByteLevel"}});
  for (int k = 0; k < 100; ++k) deep["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {deep["pre_tokenizer"]}}};
  expect_hf_error(deep, {"nests arrays and objects more than 64 deep"});

  GgufWriter w;
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a"});
  w.add_f32_array("tokenizer.ggml.scores", {0, 0, 0, -1});
  w.add_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1});
  w.write(d / "long_types.gguf");
  try {
    load_tokenizer_gguf(GgufFile(d / "long_types.gguf"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token_type has 5 entries for 4 tokens"), std::string::npos) << e.what();
  }

  // tok512.bin: int32 max_token_length, then per token a float score, an int32 length, the bytes.
  const std::string tok = mxtest::slurp(mxtest::stories260k() / "tok512.bin");
  size_t at = 4;
  for (int t = 0; t < 300; ++t) {
    int32_t len;
    std::memcpy(&len, tok.data() + at + 4, 4);
    at += 8 + size_t(len);
  }
  mxtest::spit(d / "tok300.bin", tok.substr(0, at));
  const std::string model = (mxtest::stories260k() / "stories260K.bin").string();
  const ModelTokenizer cut = load_model_tokenizer(model, d / "tok300.bin");
  ASSERT_TRUE(cut.tokenizer);
  EXPECT_EQ(cut.tokenizer->vocab_size, 300u);
  try {
    cut.check_fits(512);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds 300 tokens, the model's vocabulary 512 (a truncated file?)"),
              std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(load_model_tokenizer(model, "").check_fits(512));
}

TEST(Tokenizer, LongPromptsEncodeFast) {
  std::string text;
  for (const Case& c : read_cases("gpt-2")) text += c.text + "\n";
  std::string base = text;
  while (text.size() < 120000) text += base;
  text += std::string(20000, ' ') + std::string(20000, 'a') + std::string(5000, '7');  // long words
  for (const char* name : {"gpt-2", "llama-spm", "deepseek-coder", "bert-bge"}) {
    auto tok = load(name);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids = tok->encode(text, false);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GT(ids.size(), 20000u) << name;
    // Time is printed, not asserted (a busy or sanitized build moves it); a
    // quadratic tokenizer would run into ctest's timeout instead.
    std::printf("[ timing   ] %s: %zu tokens in %.0f ms\n", name, ids.size(), ms);
  }
}

TEST(Pretokenize, SplitsMatchTheRegexes) {
  // Expected pieces from Python's `regex` module on the original patterns.
  struct Split {
    const char* text;
    std::vector<const char*> pieces;
  };
  const std::vector<std::pair<PreSplit, std::vector<Split>>> cases = {
  {PreSplit::Gpt2, {
    {"Hello, y'all! How are you 😁 ?我想在apple工作1314151天～", {"Hello", ",", " y", "'", "all", "!", " How", " are", " you", " 😁", " ?", "我想在apple工作", "1314151", "天", "～"}},
    {"I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL", {"I", "'ve", " been", " '", "told", " he", "'s", " there", ",", " '", "RE", " you", " sure", "?", " '", "M", " not", " sure", " I", "'ll", " make", " it", ",", " '", "D", " you", " like", " some", " tea", "?", " We", "'", "Ve", " a", "'", "lL"}},
    {"\t\t\tfoo()\r\n\r\n  bar  ", {"\t\t", "\t", "foo", "()", "\r\n\r\n ", " bar", "  "}},
    {"3333333 3.3 3..3 12345678", {"3333333", " 3", ".", "3", " 3", "..", "3", " 12345678"}},
    {"нещо на Български", {"нещо", " на", " Български"}},
    {" ?!\n\n x", {" ?!", "\n\n", " x"}},
    {"a  b   c\u00a0\u00a0d", {"a", " ", " b", "  ", " c", "\u00a0", "\u00a0", "d"}},
    {"\u3000\u3000日本\u3000語 ", {"\u3000", "\u3000", "日本", "\u3000", "語", " "}},
    {"x\u0301y 1½", {"x", "\u0301", "y", " 1½"}},
    {"  \n \n", {"  \n \n"}},
  }},
  {PreSplit::Llama3, {
    {"Hello, y'all! How are you 😁 ?我想在apple工作1314151天～", {"Hello", ",", " y", "'all", "!", " How", " are", " you", " 😁", " ?", "我想在apple工作", "131", "415", "1", "天", "～"}},
    {"I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL", {"I", "'ve", " been", " '", "told", " he", "'s", " there", ",", " '", "RE", " you", " sure", "?", " '", "M", " not", " sure", " I", "'ll", " make", " it", ",", " '", "D", " you", " like", " some", " tea", "?", " We", "'Ve", " a", "'lL"}},
    {"\t\t\tfoo()\r\n\r\n  bar  ", {"\t\t", "\tfoo", "()\r\n\r\n", " ", " bar", "  "}},
    {"3333333 3.3 3..3 12345678", {"333", "333", "3", " ", "3", ".", "3", " ", "3", "..", "3", " ", "123", "456", "78"}},
    {"нещо на Български", {"нещо", " на", " Български"}},
    {" ?!\n\n x", {" ?!\n\n", " x"}},
    {"a  b   c\u00a0\u00a0d", {"a", " ", " b", "  ", " c", "\u00a0", "\u00a0d"}},
    {"\u3000\u3000日本\u3000語 ", {"\u3000", "\u3000日本", "\u3000語", " "}},
    {"x\u0301y 1½", {"x", "\u0301y", " ", "1½"}},
    {"  \n \n", {"  \n \n"}},
  }},
  {PreSplit::Qwen2, {
    {"Hello, y'all! How are you 😁 ?我想在apple工作1314151天～", {"Hello", ",", " y", "'all", "!", " How", " are", " you", " 😁", " ?", "我想在apple工作", "1", "3", "1", "4", "1", "5", "1", "天", "～"}},
    {"I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL", {"I", "'ve", " been", " '", "told", " he", "'s", " there", ",", " '", "RE", " you", " sure", "?", " '", "M", " not", " sure", " I", "'ll", " make", " it", ",", " '", "D", " you", " like", " some", " tea", "?", " We", "'Ve", " a", "'lL"}},
    {"\t\t\tfoo()\r\n\r\n  bar  ", {"\t\t", "\tfoo", "()\r\n\r\n", " ", " bar", "  "}},
    {"3333333 3.3 3..3 12345678", {"3", "3", "3", "3", "3", "3", "3", " ", "3", ".", "3", " ", "3", "..", "3", " ", "1", "2", "3", "4", "5", "6", "7", "8"}},
    {"нещо на Български", {"нещо", " на", " Български"}},
    {" ?!\n\n x", {" ?!\n\n", " x"}},
    {"a  b   c\u00a0\u00a0d", {"a", " ", " b", "  ", " c", "\u00a0", "\u00a0d"}},
    {"\u3000\u3000日本\u3000語 ", {"\u3000", "\u3000日本", "\u3000語", " "}},
    {"x\u0301y 1½", {"x", "\u0301y", " ", "1", "½"}},
    {"  \n \n", {"  \n \n"}},
  }},
  {PreSplit::Deepseek3, {
    {"Hello, y'all! How are you 😁 ?我想在apple工作1314151天～", {"Hello", ",", " y", "'all", "!", " How", " are", " you", " 😁", " ?", "我想在apple工作", "131415", "1天", "～"}},
    {"x.foo(bar) += 'a'; $HOME ~é ~~ a~b", {"x", ".foo", "(bar", ")", " +=", " '", "a", "';", " $", "HOME", " ~", "é", " ~~", " a", "~b"}},
    {"  \n\t\nnaïve cafe\u0301  ", {"  \n\t\n", "naïve", " cafe\u0301", "  "}},
    {"ひらがなカタカナ漢字 한국어", {"ひらがなカタカナ漢字", " 한국어"}},
    {"¿Qué? «sí» 3€", {"¿", "Qué", "?", " «", "sí", "»", " ", "3", "€"}},
  }},
  {PreSplit::Deepseek3LlamaCpp, {
    {"Hello, y'all! How are you 😁 ?我想在apple工作1314151天～", {"Hello", ",", " y", "'all", "!", " How", " are", " you", " 😁", " ?", "我想在apple工作", "131415", "1天", "～"}},
    {"x.foo(bar) += 'a'; $HOME ~é ~~ a~b", {"x", ".foo", "(bar", ")", " +=", " '", "a", "';", " $", "HOME", " ", "~é", " ", "~~", " a", "~b"}},
    {"  \n\t\nnaïve cafe\u0301  ", {"  \n\t\n", "naïve", " cafe\u0301", "  "}},
    {"ひらがなカタカナ漢字 한국어", {"ひらがなカタカナ漢字", " 한국어"}},
    {"¿Qué? «sí» 3€", {"¿", "Qué", "?", " «", "sí", "»", " ", "3", "€"}},
  }},
  {PreSplit::CjkDeepseek3, {
    {"Hello, y'all! How are you 😁 ?我想在apple工作1314151天～", {"Hello, y'all! How are you 😁 ?", "我想在", "apple", "工作", "1314151", "天", "～"}},
    {"x.foo(bar) += 'a'; $HOME ~é ~~ a~b", {"x.foo(bar) += 'a'; $HOME ~é ~~ a~b"}},
    {"  \n\t\nnaïve cafe\u0301  ", {"  \n\t\nnaïve cafe\u0301  "}},
    {"ひらがなカタカナ漢字 한국어", {"ひらがなカタカナ漢字", " 한국어"}},
    {"¿Qué? «sí» 3€", {"¿Qué? «sí» 3€"}},
  }},
  };
  for (const auto& [step, splits] : cases) {
    SCOPED_TRACE(pre_split_regex(step));
    for (const Split& s : splits) {
      std::vector<uint32_t> cps = unicode::decode_utf8(s.text);
      PreSplit steps[] = {step};
      std::vector<std::string> got;
      for (const Piece& p : pretokenize(cps, steps)) got.push_back(unicode::encode_utf8(cps.data() + p.begin, p.end - p.begin));
      EXPECT_EQ(got, std::vector<std::string>(s.pieces.begin(), s.pieces.end())) << "'" << s.text << "'";
    }
  }
  // steps compose: refact splits digits first, then the GPT-2 regex
  std::vector<uint32_t> cps = unicode::decode_utf8("ab 123");
  PreSplit refact[] = {PreSplit::DigitEach, PreSplit::Gpt2};
  EXPECT_EQ(pretokenize(cps, refact).size(), 5u);  // "ab" " " "1" "2" "3"
  EXPECT_TRUE(pretokenize({}, refact).empty());
  EXPECT_EQ(pre_split_for_regex(pre_split_regex(PreSplit::Llama3)), PreSplit::Llama3);
  EXPECT_FALSE(pre_split_for_regex("\\w+").has_value());
}

TEST(Unicode, CategoriesCaseAndNfc) {
  using namespace unicode;
  EXPECT_TRUE(is_letter('a'));
  EXPECT_TRUE(is_letter(0x4E2D));   // 中
  EXPECT_TRUE(is_number(0x00BD));   // ½
  EXPECT_TRUE(is_number(0x0661));   // Arabic-Indic one
  EXPECT_TRUE(is_punct(0x3002));    // 。
  EXPECT_EQ(category('$'), kSymbol);
  EXPECT_EQ(category(0x0301), kMark);
  EXPECT_EQ(category(0x0378), kUndefined);
  EXPECT_TRUE(is_whitespace(0x3000));
  EXPECT_FALSE(is_whitespace(0x200B));
  EXPECT_EQ(to_lower(0x0416), 0x0436u);  // Ж -> ж
  EXPECT_EQ(to_lower(0x0130), 0x0069u);  // İ -> i
  EXPECT_EQ(nfd_first(0x00C9), 0x0045u); // É -> E
  EXPECT_EQ(nfd_first(0xAC01), 0x1100u); // 각 -> ᄀ
  EXPECT_EQ(nfc("e\xcc\x81"), "\xc3\xa9");                              // e + acute -> é
  EXPECT_EQ(nfc("\xe2\x84\xab"), "\xc3\x85");                           // Å (angstrom) -> Å
  EXPECT_EQ(nfc("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8"), "\xea\xb0\x81");  // jamo -> 각
  EXPECT_EQ(nfc("a\xcc\xa3\xcc\x87"), nfc("a\xcc\x87\xcc\xa3"));        // marks reordered
  EXPECT_EQ(decode_utf8("a\xff\xc3"), (std::vector<uint32_t>{'a', kReplacement, kReplacement}));
}
