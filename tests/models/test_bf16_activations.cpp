// What rounding activations to bf16 (the AVX512-BF16 matmul kernels,
// backends/cpu/matmul.h) costs a bf16 model, and a block-FP8 one (whose weights
// those kernels also round to bf16 after the block scale): the next-token
// distributions against the f32-activation product, per family, as KL divergence
// and top-1 agreement; and what attention's bf16 products (backends/cpu/attention.h)
// cost on their own.
// The kernels' own arithmetic is checked in tests/backends/test_matmul.cpp and
// test_attention.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "backends/cpu/attention.h"
#include "convert/quantizer.h"
#include "engine/generate.h"
#include "f32_activations.h"
#include "models/model.h"
#include "model_test_util.h"
#include "test_util.h"

using namespace mx;

namespace {

// KL(p || q) of two logit rows, in nats.
double kl_of_logits(const float* p_logits, const float* q_logits, size_t V) {
  auto log_softmax = [V](const float* l) {
    double m = l[0];
    for (size_t v = 1; v < V; ++v) m = std::max(m, double(l[v]));
    double s = 0;
    for (size_t v = 0; v < V; ++v) s += std::exp(double(l[v]) - m);
    std::vector<double> out(V);
    for (size_t v = 0; v < V; ++v) out[v] = double(l[v]) - m - std::log(s);
    return out;
  };
  const std::vector<double> lp = log_softmax(p_logits), lq = log_softmax(q_logits);
  double kl = 0;
  for (size_t v = 0; v < V; ++v) kl += std::exp(lp[v]) * (lp[v] - lq[v]);
  return kl;
}

size_t argmax(const float* l, size_t V) { return size_t(std::max_element(l, l + V) - l); }

class Bf16Activations : public ::testing::TestWithParam<const char*> {
 protected:
  // The synthetic bf16 model of the family, or its FP8 quantization; against the
  // exact products (matmuls and attention), or with bf16 matmuls on both sides
  // and only attention's products differing.
  void check(bool fp8, bool attention_only = false);
};

TEST_P(Bf16Activations, KeepTheF32ProductsPredictions) { check(false); }
TEST_P(Bf16Activations, KeepTheF32ProductsPredictionsOnFp8Weights) { check(true); }
TEST_P(Bf16Activations, KeepTheF32AttentionsPredictions) { check(false, true); }

void Bf16Activations::check(bool fp8, bool attention_only) {
  if (!matmul_bf16_activations(best_isa()))
    GTEST_SKIP() << "SKIPPED: BF16 matmuls take f32 activations here (no AVX512-BF16, or "
                    "MXSERVE_BF16_ACTIVATIONS=0): " << cpu_features_string();
  mxtest::TempDir d;
  std::string dir = mxtest::make_synthetic((d.path() / "bf16").string(), GetParam(), DType::BF16, 5);
  if (fp8) {
    QuantizeOptions q;
    q.method = QuantMethod::Fp8Block;
    const QuantizeReport r = quantize_checkpoint(dir, (d.path() / "fp8").string(), q);
    ASSERT_GT(r.quantized, 0);
    dir = (d.path() / "fp8").string();
  }
  auto model = load_model(dir);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 48; ++i) prompt.push_back(int32_t((i * 37 + 11) % 300 + 1));
  const std::vector<float> rounded = prompt_logits(*model, prompt, true, 16);
  if (attention_only && attention_products(best_isa(), DType::BF16) != AttnProducts::Bf16)
    GTEST_SKIP() << "SKIPPED: attention multiplies in f32 here (no AVX512-BF16, or MXSERVE_BF16_ATTENTION=0)";
  std::vector<float> exact;
  if (attention_only) {
    const bool prev = set_attention_bf16(false);
    exact = prompt_logits(*model, prompt, true, 16);
    set_attention_bf16(prev);
  } else {
    const mxtest::F32Activations f32_products;
    exact = prompt_logits(*model, prompt, true, 16);
  }
  const size_t V = size_t(model->config().vocab_size), T = prompt.size();
  ASSERT_EQ(rounded.size(), T * V);
  double kl_sum = 0, kl_max = 0;
  size_t same_top1 = 0;
  for (size_t t = 0; t < T; ++t) {
    const double kl = kl_of_logits(&exact[t * V], &rounded[t * V], V);
    kl_sum += kl;
    kl_max = std::max(kl_max, kl);
    same_top1 += argmax(&exact[t * V], V) == argmax(&rounded[t * V], V);
  }
  std::printf("[ bf16 act ] %-12s %s %zu positions: mean KL %.3g nats, max %.3g, top-1 agreement %zu/%zu\n",
              GetParam(), attention_only ? "attention" : fp8 ? "fp8 " : "bf16", T, kl_sum / double(T), kl_max,
              same_top1, T);
  // Measured on AMD EPYC (Zen 4): mean KL ~1e-5 nats.
  EXPECT_LT(kl_sum / double(T), 1e-3) << GetParam();
  EXPECT_GE(double(same_top1), 0.9 * double(T)) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Families, Bf16Activations,
                         ::testing::Values("llama", "qwen3", "glm4_moe", "deepseek_v3", "qwen3_moe"),
                         [](const auto& i) { return std::string(i.param); });

}  // namespace
