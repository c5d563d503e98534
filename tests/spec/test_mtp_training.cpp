// The MTP head pipeline end to end: `mxserve mtp-data` records a model's own
// generations, tools/train_mtp_head.py trains its MTP layer from them (after
// checking that its torch forward picks the engine's MTP tokens), and the head
// loads with --mtp-head: over the checkpoint's own MTP layer (GLM-4.5 MoE) and
// as a new layer (stories260K, llama2.c). Speculative greedy output stays
// plain decoding's.
#include <gtest/gtest.h>

#include <string>

#include "formats/safetensors.h"
#include "test_util.h"

namespace {

std::string bin() { return mxtest::mxserve(); }
std::string trainer() { return "/usr/bin/python3 " + (mxtest::source_dir() / "tools/train_mtp_head.py").string(); }

void train_and_decode(const std::string& model, const mxtest::TempDir& d, const std::string& extra) {
  const std::string data = d / "data.safetensors", head = d / "head.safetensors";
  auto r = mxtest::run(bin() + " mtp-data --model " + model + " --out " + data + " --sequences 16 --length 48", true);
  ASSERT_EQ(r.code, 0) << r.out;
  {  // what the trainer reads
    mx::TensorStore s = mx::load_safetensors(data);
    EXPECT_EQ(s.get("tokens").dims(), (std::vector<int64_t>{16, 48}));
    EXPECT_EQ(s.get("topk_ids").shape[2], 32);
    EXPECT_EQ(s.metadata.at("format"), "mxserve-mtp-data");
  }
  r = mxtest::run(trainer() + " --model " + model + " --data " + data + " --out " + head +
                      " --steps 6 --batch 4 --threads 1" + extra,
                  true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("wrote"), std::string::npos) << r.out;
  const std::string gen = bin() + " generate --model " + model + " --prompt-ids '1 2 3 4' --max-tokens 40 " +
                          "--temperature 0 --ignore-eos --print-ids";
  auto plain = mxtest::run(gen);
  auto spec = mxtest::run(gen + " --mtp-head " + head + " --speculative mtp --spec-steps 3");
  ASSERT_EQ(plain.code, 0);
  ASSERT_EQ(spec.code, 0) << spec.out;
  EXPECT_EQ(spec.out, plain.out);
}

TEST(MtpTraining, GlmMoeRetrainsItsOwnMtpLayer) {
  MXTEST_NEEDS(mxtest::have_torch(), "/usr/bin/python3 with torch and numpy (apt-get install python3-torch)");
  mxtest::TempDir d;
  const std::string model = d / "glm";
  ASSERT_EQ(mxtest::run(bin() + " make-test-model --arch glm4_moe --preset tiny --out " + model).code, 0);
  // The engine's MTP picks are reproduced by the trainer before it trains (it exits otherwise).
  train_and_decode(model, d, "");
  auto r = mxtest::run(trainer() + " --model " + model + " --data " + (d / "data.safetensors") +
                           " --out " + (d / "h2.safetensors") + " --steps 0 --train no-experts",
                       true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("picks the engine's MTP token at 1.0000"), std::string::npos) << r.out;
}

TEST(MtpTraining, Stories260KGetsANewHead) {
  MXTEST_NEEDS(mxtest::have_torch(), "/usr/bin/python3 with torch and numpy (apt-get install python3-torch)");
  mxtest::TempDir d;
  train_and_decode((mxtest::stories260k() / "stories260K.bin").string(), d, "");
}

TEST(MtpTraining, ClearErrors) {
  MXTEST_NEEDS(mxtest::have_torch(), "/usr/bin/python3 with torch and numpy (apt-get install python3-torch)");
  mxtest::TempDir d;
  const std::string stories = (mxtest::stories260k() / "stories260K.bin").string();
  // Data of another model.
  const std::string glm = d / "glm", data = d / "data.safetensors";
  ASSERT_EQ(mxtest::run(bin() + " make-test-model --arch glm4_moe --preset tiny --out " + glm).code, 0);
  ASSERT_EQ(mxtest::run(bin() + " mtp-data --model " + glm + " --out " + data + " --sequences 4 --length 32").code, 0);
  auto r = mxtest::run(trainer() + " --model " + stories + " --data " + data + " --out " + (d / "h"), true);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("another model"), std::string::npos) << r.out;
  // Bad mtp-data parameters.
  r = mxtest::run(bin() + " mtp-data --model " + stories + " --out " + (d / "x") + " --length 4", true);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("length"), std::string::npos) << r.out;
  r = mxtest::run(bin() + " mtp-data --model " + stories + " --out " + (d / "x") + " --top-k 0", true);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("top-k"), std::string::npos) << r.out;
}

}  // namespace
