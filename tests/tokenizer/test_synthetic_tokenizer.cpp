// make-test-model's tokenizers: a real byte-level BPE per family, loadable by
// load_tokenizer_hf, with exactly the config's vocab_size tokens, the family's
// special tokens at the ids config.json names, and the family's chat template.
#include <gtest/gtest.h>

#include <set>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "devtools/bpe_trainer.h"
#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "devtools/synthetic.h"
#include "test_util.h"

using namespace mx;
using nlohmann::json;

namespace {

namespace fs = std::filesystem;

struct Family {
  const char* arch;
  const char* bos;                // what config.json's bos_token_id is
  std::vector<const char*> eos;   // what config.json's eos_token_id is
  const char* tokenizer_eos;      // tokenizer_config.json eos_token
  const char* template_file;      // data/chat_templates
  std::vector<const char*> roles; // special tokens the rendered chat must contain
};

const std::string kDsBos = "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
const std::string kDsEos = "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
const std::string kDsUser = "<\xef\xbd\x9cUser\xef\xbd\x9c>";
const std::string kDsAssistant = "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>";

const std::vector<Family>& families() {
  static const std::vector<Family> f = {
      {"llama", "<|begin_of_text|>", {"<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"}, "<|eot_id|>",
       "meta-llama-Llama-3.3-70B-Instruct.jinja", {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}},
      {"qwen2", "<|endoftext|>", {"<|im_end|>", "<|endoftext|>"}, "<|im_end|>", "Qwen-Qwen2.5-7B-Instruct.jinja",
       {"<|im_start|>", "<|im_end|>"}},
      {"qwen3", "<|endoftext|>", {"<|im_end|>", "<|endoftext|>"}, "<|im_end|>", "Qwen-Qwen3-0.6B.jinja",
       {"<|im_start|>", "<|im_end|>"}},
      {"qwen3_moe", "<|endoftext|>", {"<|im_end|>", "<|endoftext|>"}, "<|im_end|>", "Qwen-Qwen3-0.6B.jinja",
       {"<|im_start|>", "<|im_end|>"}},
      {"glm4_moe", "[gMASK]", {"<|endoftext|>", "<|user|>", "<|observation|>"}, "<|endoftext|>",
       "zai-org-GLM-4.5.jinja", {"[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>"}},
      {"deepseek_v3", kDsBos.c_str(), {kDsEos.c_str()}, kDsEos.c_str(), "deepseek-ai-DeepSeek-V3.1.jinja",
       {kDsBos.c_str(), kDsUser.c_str(), kDsAssistant.c_str(), kDsEos.c_str()}},
  };
  return f;
}

json read_json(const fs::path& p) { return json::parse(mxtest::slurp(p)); }

std::vector<int> ids_of(const json& v) {
  if (v.is_array()) return v.get<std::vector<int>>();
  return {v.get<int>()};
}

const char* const kTexts[] = {
    "The quick brown fox jumps over the lazy dog. It's 12:45 and 3.14159 < 22/7!",
    "Hello, w\xc3\xb6rld! na\xc3\xafve caf\xc3\xa9 \xe2\x80\x94 \xe2\x80\x98quotes\xe2\x80\x99 \xe2\x80\xa6",
    "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c \xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf "
    "\xd0\xbf\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7",
    "emoji \xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d"
    "\xf0\x9f\x91\xa7 \xf0\x9f\x87\xab\xf0\x9f\x87\xb7 \xe2\x9d\xa4\xef\xb8\x8f",
    "  leading and trailing spaces  \n\n\ttabs\r\nwindows\n   ",
    "def f(x):\n    return x ** 2  # square\n",
    "",
};

class SyntheticTokenizer : public ::testing::TestWithParam<std::tuple<const Family*, const char*>> {};

TEST_P(SyntheticTokenizer, LoadsMatchesConfigAndRoundTrips) {
  const Family& fam = *std::get<0>(GetParam());
  const std::string preset = std::get<1>(GetParam());
  mxtest::TempDir d;
  SyntheticSpec spec;
  spec.arch = fam.arch;
  spec.preset = preset;
  spec.dtype = DType::BF16;
  write_synthetic_model(d.path().string(), spec);

  const json cfg = read_json(d.path() / "config.json");
  const json tcfg = read_json(d.path() / "tokenizer_config.json");
  const json gen = read_json(d.path() / "generation_config.json");
  auto tok = load_tokenizer_hf((d.path() / "tokenizer.json").string());
  ASSERT_TRUE(tok);
  const int vocab = cfg.at("vocab_size").get<int>();
  EXPECT_EQ(tok->vocab_size, size_t(vocab));
  EXPECT_EQ(tok->model, "gpt2");

  // config.json's ids are the family's special tokens, and agree with generation_config.json.
  auto id = [&](const std::string& text) {
    auto v = tok->find_token(text);
    EXPECT_TRUE(v.has_value()) << text;
    return v.value_or(-1);
  };
  EXPECT_EQ(cfg.at("bos_token_id").get<int>(), id(fam.bos));
  std::vector<int> want_eos;
  for (const char* e : fam.eos) want_eos.push_back(id(e));
  EXPECT_EQ(ids_of(cfg.at("eos_token_id")), want_eos);
  EXPECT_EQ(ids_of(gen.at("eos_token_id")), want_eos);
  EXPECT_EQ(gen.at("bos_token_id"), cfg.at("bos_token_id"));
  EXPECT_EQ(tok->eos_id, id(fam.tokenizer_eos));
  EXPECT_EQ(tcfg.at("eos_token").get<std::string>(), fam.tokenizer_eos);
  for (int e : want_eos) {
    EXPECT_GE(e, 0);
    EXPECT_LT(e, vocab);
    EXPECT_EQ(tok->token_type(e), TokenType::Control) << tok->token_text(e);
  }
  if (cfg.contains("pad_token_id")) {
    EXPECT_EQ(cfg["pad_token_id"].get<int>(), id(tcfg.at("pad_token").get<std::string>()));
  }
  if (tcfg.value("add_bos_token", false)) {
    EXPECT_TRUE(tok->add_bos);
    EXPECT_EQ(tok->bos_id, id(fam.bos));
    EXPECT_EQ(tok->encode("hi", true).front(), tok->bos_id);
  }

  // Layout: 256 byte tokens first, learned merges, then the specials at the top.
  const json tj = read_json(d.path() / "tokenizer.json");
  const size_t learned = tj["model"]["vocab"].size();
  EXPECT_EQ(learned + tj["added_tokens"].size(), size_t(vocab));
  EXPECT_GT(learned, 256u);
  EXPECT_EQ(tok->token_text(0), "!");
  for (const auto& a : tj["added_tokens"]) EXPECT_GE(a["id"].get<size_t>(), learned) << a.dump();
  EXPECT_EQ(tj["added_tokens"].front()["id"].get<size_t>(), learned);
  EXPECT_EQ(tj["added_tokens"].back()["id"].get<int>(), vocab - 1);
  if (preset == "small") {
    EXPECT_GT(learned, 1900u) << "the small vocabularies are all learned merges";
  }

  // A real BPE: common English words are single tokens, English text compresses.
  EXPECT_EQ(tok->encode(" the", false).size(), 1u);
  const std::string english = "The children walked to the market in the morning, and the old man sat by the river.";
  const size_t n_english = tok->encode(english, false).size();
  EXPECT_LT(n_english, english.size() * (preset == "tiny" ? 3 : 1) / 4) << n_english << " tokens";

  for (const char* text : kTexts) {
    std::vector<int32_t> ids = tok->encode(text, false);
    for (int32_t i : ids) {
      ASSERT_GE(i, 0);
      ASSERT_LT(i, vocab);
    }
    EXPECT_EQ(tok->decode(ids), text) << fam.arch;
  }
  // Control tokens written in text stay text unless parse_special.
  const std::string first_role = fam.roles.back();
  std::vector<int32_t> plain = tok->encode(first_role, false, false);
  EXPECT_EQ(tok->decode(plain), first_role);
  std::vector<int32_t> special = tok->encode("x" + first_role + "y", false, true);
  EXPECT_NE(std::find(special.begin(), special.end(), id(first_role)), special.end());

  // The family's real chat template, rendered and tokenized.
  EXPECT_EQ(tcfg.at("chat_template").get<std::string>(),
            mxtest::slurp(mxtest::source_dir() / "data" / "chat_templates" / fam.template_file));
  const json msgs = json::parse(R"([
      {"role": "system", "content": "You are a helpful assistant."},
      {"role": "user", "content": "Hello! Caf\u00e9 \ud83d\ude00"},
      {"role": "assistant", "content": "Hi there! How can I help?"},
      {"role": "user", "content": "What is 2+2?"}])");
  const std::string prompt = apply_chat_template(d.path().string(), msgs, true);
  EXPECT_NE(prompt.find("What is 2+2?"), std::string::npos) << prompt;
  std::vector<int32_t> pids = tok->encode(prompt, false, true);
  for (const char* role : fam.roles)
    EXPECT_NE(std::find(pids.begin(), pids.end(), id(role)), pids.end()) << role << " in " << prompt;
  std::string back;
  for (int32_t i : pids) back += tok->token_piece(i, true);
  EXPECT_EQ(back, prompt);
}

std::vector<std::tuple<const Family*, const char*>> cases() {
  std::vector<std::tuple<const Family*, const char*>> v;
  for (const Family& f : families())
    for (const char* p : {"tiny", "small"}) v.emplace_back(&f, p);
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, SyntheticTokenizer, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)->arch) + "_" + std::get<1>(info.param);
                         });

TEST(SyntheticTokenizerWriter, LargeVocabulariesArePaddedWithVisibleFillerTokens) {
  mxtest::TempDir d;
  auto t0 = std::chrono::steady_clock::now();
  SyntheticTokenizerInfo info = write_synthetic_tokenizer(d.path().string(), "llama", 32000, 8192);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ timing   ] training + writing a 32000-token vocabulary: %.3f s\n", s);
  EXPECT_GT(info.learned_merges, 1900u);
  EXPECT_EQ(256 + info.learned_merges + 11 + info.reserved, 32000u);
  auto tok = load_tokenizer_hf((d.path() / "tokenizer.json").string());
  EXPECT_EQ(tok->vocab_size, 32000u);
  // The specials sit at the top; below them, fillers that decode to distinct visible text.
  EXPECT_EQ(tok->token_text(31999), "<|python_tag|>");
  EXPECT_EQ(tok->token_type(31999), TokenType::Control);
  const size_t first_filler = 256 + info.learned_merges;
  std::set<std::string> seen;
  for (size_t id = first_filler; id < first_filler + info.reserved; ++id) {
    EXPECT_EQ(tok->token_type(int32_t(id)), TokenType::Normal) << id;
    const std::string piece = tok->decode(std::vector<int32_t>{7, int32_t(id)}).substr(1);  // after "("
    EXPECT_EQ(piece, fmt::format(" tok{}", id - first_filler)) << id;
    EXPECT_TRUE(seen.insert(piece).second) << piece;
  }
  EXPECT_EQ(seen.size(), info.reserved);
  EXPECT_EQ(info.bos_id, *tok->find_token("<|begin_of_text|>"));
  EXPECT_EQ(tok->decode(tok->encode(kTexts[1], false)), kTexts[1]);
}

TEST(SyntheticTokenizerWriter, TrainingIsFastAndDeterministic) {
  BpeTrainOptions o;
  o.pre = {PreSplit::Qwen2};
  o.max_tokens = 32000;
  auto t0 = std::chrono::steady_clock::now();
  BpeVocab a = train_bpe(bpe_builtin_corpus(), o);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ timing   ] 32000-token BPE training: %.3f s\n", s);  // a figure, not a verdict
  BpeVocab b = train_bpe(bpe_builtin_corpus(), o);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.merges, b.merges);
  ASSERT_GT(a.merges.size(), 10u);
  // The first merges of English text.
  EXPECT_EQ(a.merges[0], std::make_pair(std::string("\xc4\xa0"), std::string("t")));  // "Ġ t"
  EXPECT_NE(std::find(a.tokens.begin(), a.tokens.end(), "\xc4\xa0the"), a.tokens.end());
  o.max_tokens = 300;
  EXPECT_EQ(train_bpe(bpe_builtin_corpus(), o).tokens.size(), 300u);

  mxtest::TempDir d1, d2;
  write_synthetic_tokenizer(d1.path().string(), "qwen3", 2048, 2048);
  write_synthetic_tokenizer(d2.path().string(), "qwen3", 2048, 2048);
  EXPECT_EQ(mxtest::slurp(d1.path() / "tokenizer.json"), mxtest::slurp(d2.path() / "tokenizer.json"));
}

TEST(SyntheticTokenizerWriter, RejectsVocabulariesTooSmallForTheSpecials) {
  mxtest::TempDir d;
  EXPECT_THROW(write_synthetic_tokenizer(d.path().string(), "glm4_moe", 280, 512), Error);
  EXPECT_THROW(write_synthetic_tokenizer(d.path().string(), "gpt2", 320, 512), Error);
}

}  // namespace
