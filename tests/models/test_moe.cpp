// MoE families on synthetic real-layout checkpoints: loading, batch
// invariance, MTP entry point, and the loader's verdict on MTP-layer mistakes.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/generate.h"
#include "formats/safetensors.h"
#include "models/model.h"
#include "devtools/synthetic.h"
#include "model_test_util.h"
#include "test_util.h"

using namespace mx;

namespace {

std::string make(const mxtest::TempDir& d, const std::string& arch, DType dt = DType::F32) {
  return mxtest::make_synthetic(d.path().string(), arch, dt, 3);
}

class MoeArch : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeArch, BatchOfSequencesMatchesEachAloneBitwise) {
  mxtest::TempDir d;
  auto m = load_model(make(d, GetParam()));
  mxtest::expect_batch_matches_alone(*m, {1, 50, 60, 70}, {1, 300, 200, 100, 9, 8, 7, 6, 5});
}

TEST_P(MoeArch, ChunkedPrefillIsBitwiseIdentical) {
  mxtest::TempDir d;
  auto m = load_model(make(d, GetParam()));
  const std::vector<int32_t> p = {1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41};
  auto one = prompt_logits(*m, p, true, 64), chunked = prompt_logits(*m, p, true, 4);
  EXPECT_EQ(std::memcmp(one.data(), chunked.data(), one.size() * 4), 0);
}

TEST_P(MoeArch, TouchesOnlySelectedExpertsPerToken) {
  mxtest::TempDir d;
  auto m = load_model(make(d, GetParam()));
  const ModelConfig& c = m->config();
  int moe_layers = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) moe_layers += c.is_moe_layer(l);
  ASSERT_GT(moe_layers, 0);
  const size_t expert = size_t(3) * c.hidden_size * c.moe.moe_intermediate_size * 4;  // f32
  const size_t unselected = size_t(moe_layers) * (c.moe.n_routed_experts - c.moe.num_experts_per_tok) * expert;
  EXPECT_LE(m->bytes_per_token(), m->weight_bytes() - unselected);
  EXPECT_GE(m->bytes_per_token(), size_t(moe_layers) * c.moe.num_experts_per_tok * expert);
}

INSTANTIATE_TEST_SUITE_P(All, MoeArch, ::testing::Values("glm4_moe", "deepseek_v3", "qwen3_moe"));

TEST(Mtp, EntryPointProducesLogitsAndUsesItsOwnKv) {
  mxtest::TempDir d;
  auto m = load_model(make(d, "glm4_moe"));
  ASSERT_EQ(m->num_mtp_layers(), 1);
  const ModelConfig& c = m->config();
  const std::vector<int32_t> p = {1, 7, 8, 9, 10};
  const int T = int(p.size()), V = c.vocab_size, H = c.hidden_size;
  KVPool pool(m->kv_layout(), 4, 16);
  SeqKV kv;
  ASSERT_TRUE(kv.reserve(pool, T));
  Batch b;
  b.add(&kv, p.data(), T, 0, true);
  std::vector<float> logits(V), hidden(size_t(T) * H);
  m->forward(b, pool, logits.data(), hidden.data());
  // MTP over positions 0..T-2 with tokens p[1..T-1], in one batch and step by step.
  Batch mb;
  mb.add(&kv, p.data() + 1, T - 1, 0, false);
  for (int i = 0; i < T - 1; ++i) mb.logit_rows.push_back(i);
  std::vector<float> all(size_t(T - 1) * V);
  m->forward_mtp(0, mb, pool, hidden.data(), all.data());
  for (int t = 0; t < T - 1; ++t) {
    Batch sb;
    sb.add(&kv, p.data() + 1 + t, 1, t, true);
    std::vector<float> one(V);
    m->forward_mtp(0, sb, pool, hidden.data() + size_t(t) * H, one.data());
    EXPECT_EQ(std::memcmp(one.data(), all.data() + size_t(t) * V, V * 4), 0) << "position " << t;
  }
}

TEST(Mtp, MissingMtpTensorIsNamedNotSilentlyDropped) {
  mxtest::TempDir d;
  make(d, "deepseek_v3");
  // Drop the MTP layer's eh_proj (layer index num_hidden_layers = 3).
  mxtest::rewrite_checkpoint(d.path().string(), [](auto& list, auto&) {
    std::erase_if(list, [](const NamedTensor& n) { return n.name == "model.layers.3.eh_proj.weight"; });
  });
  try {
    load_model(d.path().string());
    FAIL() << "loaded a checkpoint whose MTP layer lacks eh_proj";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.3.eh_proj.weight"), std::string::npos) << e.what();
  }
}

TEST(Mtp, MtpTensorsWithoutConfigAreUnusedNotIgnored) {
  mxtest::TempDir d;
  make(d, "glm4_moe");
  auto cfg = nlohmann::json::parse(mxtest::slurp(d / "config.json"));
  cfg["num_nextn_predict_layers"] = 0;
  mxtest::spit(d / "config.json", cfg.dump());
  try {
    load_model(d.path().string());
    FAIL() << "MTP tensors silently ignored";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("unused tensors"), std::string::npos) << m;
    EXPECT_NE(m.find("model.layers.3.eh_proj.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("model.layers.3.mlp.experts.0.up_proj.weight"), std::string::npos) << m;
  }
}

}  // namespace
