// The backend decoder (models/backend_decoder.h): a model run op by op through a
// Backend. On the CPU backend it must give the logits and greedy tokens of the
// model's own forward (DecoderModel::forward); every GPU backend compiled in
// must give the CPU backend's (skipped without a device, as in CI).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/generate.h"
#include "kernels/backend.h"
#include "models/backend_decoder.h"
#include "models/model.h"
#include "models/synthetic.h"
#include "quant/quantizer.h"
#include "kernels/gpu_test_util.h"
#include "model_test_util.h"
#include "test_util.h"

using namespace mx;

namespace {

std::string make(const mxtest::TempDir& d, const std::string& arch, DType dt) {
  return mxtest::make_synthetic(d.path().string(), arch, dt, 11);
}

const DecoderModel& decoder(const Model& m) {
  const auto* d = dynamic_cast<const DecoderModel*>(&m);
  EXPECT_NE(d, nullptr);
  return *d;
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// Logits after the prompt (run in chunks of `chunk`), then after each of `steps`
// greedy decode steps, and the greedy tokens, from a backend decoder.
struct Trace {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> tokens;
};

Trace run_backend(const Model& m, Backend& b, const std::vector<int32_t>& prompt, int steps, int chunk) {
  BackendDecoder dec(decoder(m), b, 64, 16);
  const int V = m.config().vocab_size;
  Trace r;
  for (int p = 0; p < int(prompt.size()); p += chunk)
    dec.forward(prompt.data() + p, std::min<int>(chunk, int(prompt.size()) - p), p);
  int pos = int(prompt.size());
  for (int s = 0; s <= steps; ++s) {
    std::vector<float> lg(V);
    dec.logits(lg.data());
    r.logits.push_back(lg);
    if (s == steps) break;
    const int32_t t = dec.next_token(0.0f, 0);
    r.tokens.push_back(t);
    dec.forward(&t, 1, pos++);
  }
  return r;
}

// The same from the model's own forward.
Trace run_native(Model& m, const std::vector<int32_t>& prompt, int steps) {
  Trace r;
  std::vector<int32_t> seq = prompt;
  for (int s = 0; s <= steps; ++s) {
    r.logits.push_back(prompt_logits(m, seq));
    if (s == steps) break;
    const auto& lg = r.logits.back();
    const int32_t t = int32_t(std::max_element(lg.begin(), lg.end()) - lg.begin());
    r.tokens.push_back(t);
    seq.push_back(t);
  }
  return r;
}

void expect_close(const Trace& got, const Trace& want, float rel, const std::string& what) {
  ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
  EXPECT_EQ(got.tokens, want.tokens) << what;
  for (size_t s = 0; s < want.logits.size(); ++s) {
    const float tol = rel * std::max(1.0f, max_abs(want.logits[s]));
    EXPECT_LE(max_diff(got.logits[s], want.logits[s]), tol) << what << " step " << s;
  }
}

const std::vector<int32_t> kPrompt = {1, 17, 300, 42, 9, 250, 7, 81, 5, 133, 64};

struct Case {
  std::string arch;
  DType dtype;
  bool mxfp4;  // quantize the checkpoint's Linear layers to MXFP4 first
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.arch << " " << (c.mxfp4 ? "mxfp4" : dtype_name(c.dtype)); }
std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  return i.param.arch + "_" + (i.param.mxfp4 ? "mxfp4" : dtype_name(i.param.dtype));
}

class BackendDecoderArch : public ::testing::TestWithParam<Case> {
 protected:
  std::unique_ptr<Model> load(const mxtest::TempDir& d) {
    const Case& c = GetParam();
    std::string path = make(d, c.arch, c.dtype);
    if (c.mxfp4) {
      QuantizeOptions qo;
      quantize_checkpoint(path, d / "q", qo);
      path = d / "q";
    }
    return load_model(path);
  }
};

TEST_P(BackendDecoderArch, CpuBackendMatchesTheModelsForward) {
  mxtest::TempDir d;
  auto m = load(d);
  auto cpu = make_backend("cpu");
  const Trace want = run_native(*m, kPrompt, 6);
  // Prefill in one chunk (flash-style prefill attention) and token by token
  // (paged decode attention): both equal the model's forward.
  expect_close(run_backend(*m, *cpu, kPrompt, 6, 16), want, 1e-4f, "one chunk");
  expect_close(run_backend(*m, *cpu, kPrompt, 6, 1), want, 1e-4f, "token by token");
  expect_close(run_backend(*m, *cpu, kPrompt, 6, 4), want, 1e-4f, "chunks of 4");
}

TEST_P(BackendDecoderArch, GpuBackendsMatchTheCpuBackend) {
  const std::vector<std::string> gpus = mxtest::gpu_backends();
  if (gpus.empty()) GTEST_SKIP() << "no GPU device";
  mxtest::TempDir d;
  auto m = load(d);
  auto cpu = make_backend("cpu");
  const Trace want = run_backend(*m, *cpu, kPrompt, 6, 16);
  // The CPU backend runs MXFP4 with int8-quantized activations, the GPU in f32.
  const float rel = GetParam().mxfp4 ? 3e-2f : 2e-4f;
  for (const std::string& kind : gpus) {
    auto gpu = make_backend(kind);
    std::printf("[ gpu      ] %s\n", gpu->name().c_str());
    const Trace got = run_backend(*m, *gpu, kPrompt, 6, 16);
    for (size_t s = 0; s < want.logits.size(); ++s) {
      const float err = max_diff(got.logits[s], want.logits[s]);
      std::printf("[ gpu      ] step %zu max |logit diff| %.3g (max |logit| %.3g)\n", s, err,
                  max_abs(want.logits[s]));
      EXPECT_LE(err, rel * std::max(1.0f, max_abs(want.logits[s]))) << kind << " step " << s;
    }
    // Greedy tokens equal unless the CPU's top two logits are within the tolerance.
    if (!GetParam().mxfp4) {
      EXPECT_EQ(got.tokens, want.tokens) << kind;
    }
    expect_close(run_backend(*m, *gpu, kPrompt, 6, 1), got, rel, kind + " token by token vs one chunk");
  }
}

INSTANTIATE_TEST_SUITE_P(All, BackendDecoderArch,
                         ::testing::Values(Case{"llama", DType::F32, false}, Case{"qwen3", DType::BF16, false},
                                           Case{"glm4_moe", DType::F32, false}, Case{"glm4_moe", DType::BF16, true},
                                           Case{"qwen3_moe", DType::BF16, false}),
                         case_name);

TEST(BackendDecoder, ClearErrors) {
  mxtest::TempDir d;
  auto m = load_model(make(d, "deepseek_v3", DType::F32));
  auto cpu = make_backend("cpu");
  try {
    BackendDecoder dec(decoder(*m), *cpu, 64);
    FAIL() << "MLA accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MLA"), std::string::npos) << e.what();
  }
  mxtest::TempDir d2;
  auto q = load_model(make(d2, "qwen3", DType::F32));
  BackendDecoder dec(decoder(*q), *cpu, 32, 8);
  const std::vector<int32_t> nine(9, 1), bad = {q->config().vocab_size};
  EXPECT_THROW(dec.forward(nine.data(), 9, 0), Error);   // more than max_tokens
  EXPECT_THROW(dec.forward(nine.data(), 8, 30), Error);  // past the context
  EXPECT_THROW(dec.forward(bad.data(), 1, 0), Error);    // token outside the vocabulary
  EXPECT_THROW(make_backend("tpu"), Error);
  EXPECT_THROW(make_backend("cuda:x"), Error);
}

}  // namespace
