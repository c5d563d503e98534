// Cross-check against an independent float64 PyTorch implementation of the HF
// modeling semantics (tools/reference/hf_reference.py) on synthetic checkpoints
// with the real tensor names.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "models/model.h"
#include "models/synthetic.h"
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
  if (!mxtest::have_torch()) GTEST_SKIP() << "SKIPPED: /usr/bin/python3 has no torch (apt-get install python3-torch)";
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
