// The CLI contract: help, clear errors with non-zero exits for bad input.
#include <gtest/gtest.h>

#include "test_util.h"

namespace {
std::string bin() { return mxtest::mxserve(); }
std::string stories() { return (mxtest::stories260k() / "stories260K.bin").string(); }
}  // namespace

TEST(Cli, HelpForTopLevelAndEverySubcommand) {
  auto r = mxtest::run(bin() + " --help");
  EXPECT_EQ(r.code, 0);
  for (const char* sub : {"generate", "logits", "inspect", "make-test-model"}) {
    EXPECT_NE(r.out.find(sub), std::string::npos) << sub;
    EXPECT_EQ(mxtest::run(bin() + " " + sub + " --help").code, 0) << sub;
  }
}

TEST(Cli, BadInvocationsFailWithAMessage) {
  struct Bad {
    std::string args, fragment;
  };
  const std::string m = " --model " + stories();
  for (const Bad& b : std::vector<Bad>{
           {"", "subcommand"},
           {"frobnicate", "frobnicate"},
           {"generate" + m + " --prompt-ids 1 --bogus", "--bogus"},
           {"generate" + m + " --prompt-ids 1 --max-tokens -5", "--max-tokens"},
           {"generate" + m + " --prompt-ids 1 --temperature abc", "--temperature"},
           {"generate" + m + " --prompt-ids 1 --top-p 1.5", "--top-p"},
           {"generate" + m + " --prompt-ids 'one two'", "not a list of token ids"},
           {"generate" + m + " --prompt-ids 1 --max-tokens 100000", "exceeds the model's context"},
           {"generate" + m + " --prompt-ids 9999", "outside the vocabulary"},
           {"generate --model /nonexistent --prompt-ids 1", "does not exist"},
           {"generate" + m, "--prompt-ids"},
       }) {
    auto r = mxtest::run(bin() + " " + b.args, true);
    EXPECT_NE(r.code, 0) << b.args;
    EXPECT_NE(r.out.find(b.fragment), std::string::npos) << b.args << "\n" << r.out;
  }
}

TEST(Cli, MalformedSafetensorsNamesTheProblem) {
  mxtest::TempDir d;
  mxtest::run(bin() + " make-test-model --arch llama --preset tiny --out " + d.path().string());
  // Truncate the weights file: the loader must say which tensor runs past the end.
  auto bytes = mxtest::slurp(d / "model.safetensors");
  mxtest::spit(d / "model.safetensors", bytes.substr(0, bytes.size() - 1000));
  auto r = mxtest::run(bin() + " inspect --model " + d.path().string(), true);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("past the data section"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("truncated"), std::string::npos) << r.out;
}

TEST(Cli, InspectShowsArchitectureAndMapping) {
  auto r = mxtest::run(bin() + " inspect --model " + stories());
  ASSERT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("architecture: LlamaForCausalLM"), std::string::npos);
  EXPECT_NE(r.out.find("parameters: "), std::string::npos);
  EXPECT_NE(r.out.find("model.layers.4.self_attn.q_proj.weight -> model.layers.4.self_attn.wq  F32 [64, 64]"),
            std::string::npos)
      << r.out;
}
