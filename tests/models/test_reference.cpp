// Cross-check against an independent float64 PyTorch implementation of the HF
// modeling semantics (tools/reference/hf_reference.py) on synthetic checkpoints
// with the real tensor names.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "models/model.h"
#include "devtools/synthetic.h"
#include "f32_activations.h"
#include "test_util.h"

using namespace mx;

namespace {

struct Case {
  const char* arch;
  DType dtype;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.arch << "/" << dtype_name(c.dtype); }

class Reference : public ::testing::TestWithParam<Case> {};

TEST_P(Reference, LogitsAtEveryPositionMatchTorch) {
  MXTEST_NEEDS(mxtest::have_torch(), "/usr/bin/python3 with torch and numpy (apt-get install python3-torch)");
  const Case c = GetParam();
  mxtest::TempDir d;
  SyntheticSpec spec;
  spec.arch = c.arch;
  spec.preset = "tiny";
  spec.dtype = c.dtype;
  spec.seed = 7;
  spec.max_shard_bytes = 64 << 10;  // several shards + index
  write_synthetic_model(d.path().string(), spec);
  const std::vector<int32_t> prompt = {1, 17, 250, 3, 99, 42, 42, 7, 300, 5, 11, 200};
  auto model = load_model(d.path().string());
  const mxtest::F32Activations f32_products;  // the reference's product (Bf16Activations below)
  auto ours = prompt_logits(*model, prompt, true, 5);  // chunked prefill, 3 chunks
  std::string ids;
  for (int t : prompt) ids += std::to_string(t) + " ";
  auto r = mxtest::run("/usr/bin/python3 " + (mxtest::source_dir() / "tools/reference/hf_reference.py").string() +
                       " " + d.path().string() + " '" + ids + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  auto ref = nlohmann::json::parse(r.out)["logits"];
  ASSERT_EQ(ref.size(), prompt.size());
  const size_t V = model->config().vocab_size;
  for (size_t t = 0; t < prompt.size(); ++t) {
    double max_ref = 0, max_err = 0;
    for (size_t v = 0; v < V; ++v) {
      double want = ref[t][v].get<double>();
      max_ref = std::max(max_ref, std::fabs(want));
      max_err = std::max(max_err, std::fabs(want - ours[t * V + v]));
    }
    EXPECT_LT(max_err, 1e-3 * max_ref) << c.arch << " position " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Dense, Reference,
                         ::testing::Values(Case{"llama", DType::F32}, Case{"qwen2", DType::F32},
                                           Case{"qwen3", DType::F32}, Case{"qwen3", DType::BF16}),
                         [](const auto& i) {
                           return std::string(i.param.arch) + "_" + dtype_name(i.param.dtype);
                         });

}  // namespace

namespace {

// MoE families and their MTP head against tools/reference/moe_reference.py.
class MoeReference : public ::testing::TestWithParam<Case> {};

void expect_rows_close(const nlohmann::json& ref, const float* ours, size_t rows, size_t V,
                       const std::string& what) {
  ASSERT_EQ(ref.size(), rows) << what;
  for (size_t t = 0; t < rows; ++t) {
    double max_ref = 0, max_err = 0;
    for (size_t v = 0; v < V; ++v) {
      double want = ref[t][v].get<double>();
      max_ref = std::max(max_ref, std::fabs(want));
      max_err = std::max(max_err, std::fabs(want - ours[t * V + v]));
    }
    EXPECT_LT(max_err, 1e-3 * max_ref) << what << " position " << t;
  }
}

TEST_P(MoeReference, LogitsAndMtpLogitsMatchTorch) {
  MXTEST_NEEDS(mxtest::have_torch(), "/usr/bin/python3 with torch and numpy (apt-get install python3-torch)");
  const Case c = GetParam();
  mxtest::TempDir d;
  SyntheticSpec spec;
  spec.arch = c.arch;
  spec.dtype = c.dtype;
  spec.seed = 11;
  write_synthetic_model(d.path().string(), spec);
  const std::vector<int32_t> prompt = {1, 17, 250, 3, 99, 42, 42, 7, 300, 5};
  const int T = int(prompt.size());
  auto model = load_model(d.path().string());
  const size_t V = model->config().vocab_size, H = model->config().hidden_size;

  KVPool pool(model->kv_layout(), 4, 16);
  SeqKV kv;
  ASSERT_TRUE(kv.reserve(pool, T));
  Batch b;
  b.add(&kv, prompt.data(), T, 0, false);
  for (int t = 0; t < T; ++t) b.logit_rows.push_back(t);
  std::vector<float> logits(T * V), hidden(T * H);
  const mxtest::F32Activations f32_products;  // the reference's product
  model->forward(b, pool, logits.data(), hidden.data());

  std::string ids;
  for (int t : prompt) ids += std::to_string(t) + " ";
  auto r = mxtest::run("/usr/bin/python3 " + (mxtest::source_dir() / "tools/reference/moe_reference.py").string() +
                       " " + d.path().string() + " '" + ids + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  auto ref = nlohmann::json::parse(r.out);
  expect_rows_close(ref["logits"], logits.data(), T, V, std::string(c.arch) + " logits");

  if (model->num_mtp_layers() > 0) {
    Batch mb;
    mb.add(&kv, prompt.data() + 1, T - 1, 0, false);
    for (int t = 0; t < T - 1; ++t) mb.logit_rows.push_back(t);
    std::vector<float> mtp((T - 1) * V);
    model->forward_mtp(0, mb, pool, hidden.data(), mtp.data());
    expect_rows_close(ref["mtp_logits"], mtp.data(), T - 1, V, std::string(c.arch) + " mtp logits");
  } else {
    EXPECT_FALSE(ref.contains("mtp_logits"));
  }
}

INSTANTIATE_TEST_SUITE_P(Moe, MoeReference,
                         ::testing::Values(Case{"glm4_moe", DType::F32}, Case{"deepseek_v3", DType::F32},
                                           Case{"qwen3_moe", DType::F32}, Case{"glm4_moe", DType::BF16},
                                           Case{"deepseek_v3", DType::BF16}),
                         [](const auto& i) {
                           return std::string(i.param.arch) + "_" + dtype_name(i.param.dtype);
                         });

}  // namespace
