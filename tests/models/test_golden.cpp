// The golden test: stories260K (a real trained Llama) against the outputs of
// llama2.c's run.c, an independent float32 implementation.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/generate.h"
#include "models/model.h"
#include "test_util.h"

using namespace mx;

namespace {
std::string model_path() { return (mxtest::stories260k() / "stories260K.bin").string(); }
}  // namespace

TEST(Golden, Stories260KGreedyIdsMatchReference) {
  ASSERT_TRUE(mxtest::fs::exists(model_path())) << "missing test data: " << model_path();
  auto model = load_model(model_path());
  GenerateOptions o;
  o.max_tokens = 256;
  o.sampling.temperature = 0;
  GenerateResult r = generate(*model, {1}, o);
  auto want = mxtest::read_lines(mxtest::stories260k() / "greedy_ids_from_bos.txt");
  ASSERT_EQ(want.size(), 256u);
  ASSERT_EQ(r.tokens.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(r.tokens[i], std::stoi(want[i])) << "at " << i;
}

TEST(Golden, Stories260KLogitsAfterBos) {
  auto model = load_model(model_path());
  auto logits = prompt_logits(*model, {1});
  auto want = mxtest::read_lines(mxtest::stories260k() / "logits_after_bos.txt");
  ASSERT_EQ(logits.size(), want.size());
  double max_err = 0;
  for (size_t i = 0; i < want.size(); ++i) max_err = std::max(max_err, std::fabs(logits[i] - std::stod(want[i])));
  EXPECT_LT(max_err, 1e-4);
}

TEST(Golden, CliGenerateprintsExactlyTheGoldenIds) {
  auto r = mxtest::run(mxtest::mxserve() + " generate --model " + model_path() +
                       " --prompt-ids 1 --max-tokens 256 --temperature 0 --print-ids");
  ASSERT_EQ(r.code, 0);
  std::string want;
  for (const auto& l : mxtest::read_lines(mxtest::stories260k() / "greedy_ids_from_bos.txt"))
    want += (want.empty() ? "" : " ") + l;
  EXPECT_EQ(r.out, want + "\n");
}

TEST(Golden, CliLogitsOnePerLine) {
  auto r = mxtest::run(mxtest::mxserve() + " logits --model " + model_path() + " --prompt-ids 1");
  ASSERT_EQ(r.code, 0);
  std::istringstream in(r.out);
  auto want = mxtest::read_lines(mxtest::stories260k() / "logits_after_bos.txt");
  size_t n = 0;
  for (std::string l; std::getline(in, l); ++n) {
    ASSERT_LT(n, want.size());
    EXPECT_NEAR(std::stod(l), std::stod(want[n]), 1e-4) << "logit " << n;
  }
  EXPECT_EQ(n, want.size());
}
