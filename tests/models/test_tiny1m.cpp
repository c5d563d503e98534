// tiny1m (../shared/models/tiny1m): a real trained ~1M-parameter Llama in the
// Hugging Face layout (rotate_half RoPE, untied lm_head, f32), against goldens
// from two independent implementations (its README); its MXFP4 / FP8
// quantization measured, and its GGUF conversions loading back to the same model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/generate.h"
#include "convert/gguf_export.h"
#include "formats/gguf_model.h"
#include "tokenizer/model_tokenizer.h"
#include "models/model.h"
#include "convert/quality.h"
#include "convert/quantizer.h"
#include "test_util.h"

using namespace mx;

namespace {

std::string tiny1m() { return mxtest::tiny1m().string(); }
std::string tok512() { return (mxtest::stories260k() / "tok512.bin").string(); }

std::vector<int32_t> golden_ids() {
  std::vector<int32_t> v;
  for (const auto& l : mxtest::read_lines(mxtest::tiny1m() / "greedy_ids_from_bos.txt")) v.push_back(std::stoi(l));
  return v;
}

std::vector<int32_t> greedy(Model& m, const std::vector<int32_t>& prompt, int n) {
  GenerateOptions o;
  o.max_tokens = n;
  o.sampling.temperature = 0;
  o.ignore_eos = true;  // the goldens run on past EOS
  return generate(m, prompt, o).tokens;
}

// Along BOS + the golden continuation (teacher forcing): the fraction of
// positions where `m` picks the golden next token.
double golden_top1(Model& m) {
  std::vector<int32_t> seq = {1};
  const auto g = golden_ids();
  seq.insert(seq.end(), g.begin(), g.end() - 1);
  const auto logits = prompt_logits(m, seq, /*all_positions=*/true);
  const size_t V = size_t(m.config().vocab_size);
  int agree = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const float* row = logits.data() + i * V;
    agree += int(std::max_element(row, row + V) - row) == g[i];
  }
  return double(agree) / double(g.size());
}

}  // namespace

TEST(Tiny1m, GreedyIdsMatchTheReferences) {
  auto m = load_model(tiny1m());
  EXPECT_EQ(greedy(*m, {1}, 200), golden_ids());
}

TEST(Tiny1m, LogitsAfterBos) {
  auto m = load_model(tiny1m());
  const auto logits = prompt_logits(*m, {1});
  const auto want = mxtest::read_lines(mxtest::tiny1m() / "logits_after_bos.txt");
  ASSERT_EQ(logits.size(), want.size());
  double max_err = 0;
  for (size_t i = 0; i < want.size(); ++i) max_err = std::max(max_err, std::fabs(logits[i] - std::stod(want[i])));
  EXPECT_LT(max_err, 1e-4);
}

// It shares stories260K's 512-token vocabulary: with tok512.bin it reads text.
TEST(Tiny1m, ReadsTextThroughTheSharedVocabulary) {
  auto m = load_model(tiny1m());
  auto tok = load_model_tokenizer(tiny1m(), tok512()).tokenizer;
  ASSERT_TRUE(tok);
  const std::string text = tok->decode(greedy(*m, {1}, 16));
  EXPECT_EQ(text.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u) << text;
}

// mxserve quantize + the quality report on a real model: measured figures with
// margin (MXFP4 KL ~0.17 nats, top-1 ~82%; FP8 KL ~0.008, top-1 ~95%; see
// BENCHMARKS.md), so a broken format or kernel shows as nats, not as noise.
TEST(Tiny1m, Mxfp4AndFp8QualityIsMeasuredAndBounded) {
  mxtest::TempDir d;
  auto ref = load_model(tiny1m());
  const auto seqs = self_generated_sequences(*ref, 4, 128, 1);
  struct Want {
    QuantMethod method;
    double kl_max_mean, top1_min;
  };
  for (const Want& w : {Want{QuantMethod::Mxfp4, 0.35, 0.70}, Want{QuantMethod::Fp8Block, 0.03, 0.90}}) {
    QuantizeOptions o;
    o.method = w.method;
    const std::string out = d / (w.method == QuantMethod::Mxfp4 ? "mxfp4" : "fp8");
    quantize_checkpoint(tiny1m(), out, o);
    auto q = load_model(out);
    const QualityReport r = measure_quality(*ref, *q, seqs);
    EXPECT_GT(r.kl_mean, 0.0) << out;
    EXPECT_LT(r.kl_mean, w.kl_max_mean) << out;
    EXPECT_GT(r.top1_agreement, w.top1_min) << out;
    EXPECT_GT(r.ppl_quant, r.ppl_ref) << out;
    EXPECT_LT(r.ppl_quant, r.ppl_ref * 1.5) << out;
  }
}

// convert to GGUF: f32 is bitwise the model (the golden ids); bf16 keeps the
// golden next token along the golden text; mxfp4 is bitwise what `mxserve
// quantize --format mxfp4` gives. Each carries tok512 as a "llama" tokenizer.
TEST(Tiny1m, GgufConversionsLoadBackToTheSameModel) {
  mxtest::TempDir d;
  const Checkpoint ck = load_checkpoint(tiny1m());
  auto tok = load_model_tokenizer(tiny1m(), tok512()).tokenizer;
  auto convert = [&](GgufOutType t, const std::string& name) {
    write_gguf_checkpoint(ck, d / name, t, tok.get());
    return d / name;
  };
  auto ref = load_model(tiny1m());
  auto f32 = load_model(convert(GgufOutType::F32, "f32.gguf"));
  EXPECT_EQ(greedy(*f32, {1}, 200), golden_ids());
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  const auto a = prompt_logits(*ref, prompt, true), b = prompt_logits(*f32, prompt, true);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);

  auto bf16 = load_model(convert(GgufOutType::BF16, "bf16.gguf"));
  EXPECT_GE(golden_top1(*bf16), 0.97);

  const std::string q = d / "quantized";
  quantize_checkpoint(tiny1m(), q, {});
  auto mq = load_model(q);
  auto mx4 = load_model(convert(GgufOutType::MXFP4, "mxfp4.gguf"));
  const auto c = prompt_logits(*mq, prompt, true), e = prompt_logits(*mx4, prompt, true);
  ASSERT_EQ(c.size(), e.size());
  EXPECT_EQ(std::memcmp(c.data(), e.data(), c.size() * 4), 0);
  EXPECT_EQ(greedy(*mq, {1}, 64), greedy(*mx4, {1}, 64));

  // The tokenizer in the GGUF encodes as tok512.bin does.
  ModelTokenizer gt = load_model_tokenizer(d / "f32.gguf", "");
  ASSERT_TRUE(gt.tokenizer);
  EXPECT_EQ(gt.tokenizer->model, "llama");
  for (const char* text : {"Lily and Ben went to the park.", "naïve café ☕", "  two  spaces\nand a line"}) {
    EXPECT_EQ(gt.tokenizer->encode(text, true), tok->encode(text, true)) << text;
    EXPECT_EQ(gt.tokenizer->decode(tok->encode(text, true)), text);
  }
}
