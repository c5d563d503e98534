// One model definition on every backend (models/decoder.h over kernels/backend.h):
// the serving engine on a GPU backend gives each request the CPU backend's
// greedy tokens, with continuous batching, chunked prefill, the prefix cache,
// preemption (a KV pool too small for all requests at once) and speculative
// decoding, for a dense GQA, two MoE and an MLA family. In CI the GPU backend
// is HIP on the HIP-CPU runtime (CMake MXSERVE_HIP_CPU), so every GPU kernel
// runs there; on a machine with a GPU the same tests run on it.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/engine.h"
#include "kernels/backend.h"
#include "models/model.h"
#include "models/synthetic.h"

using namespace mx;
namespace fs = std::filesystem;

namespace {

struct Case {
  std::string arch;
  SpecMode spec;
};
std::ostream& operator<<(std::ostream& o, const Case& c) { return o << c.arch << " " << spec_mode_name(c.spec); }

std::string model_dir(const std::string& arch) {
  const fs::path d = fs::temp_directory_path() / ("mx_backends_" + arch + "_" + std::to_string(::getpid()));
  if (!fs::exists(d / "config.json")) {
    SyntheticSpec s;
    s.arch = arch;
    s.dtype = DType::F32;  // f32 weights: the backends agree to rounding, so greedy ids are equal
    write_synthetic_model(d.string(), s);
  }
  return d.string();
}

// The GPU backends this binary has a device for ("hip" on HIP-CPU in CI).
std::vector<std::string> gpu_backends() {
  std::vector<std::string> v;
  for (const std::string& k : compiled_backends())
    if (k != "cpu" && backend_device_count(k) > 0) v.push_back(k);
  return v;
}

// 16 requests at once: four share a long prefix (prefix cache hits), prompts of
// 3..40 tokens (chunked prefill with step_tokens 32), 12 new tokens each.
std::vector<std::vector<int32_t>> serve(const std::string& dir, const std::string& backend, SpecMode spec,
                                        int kv_blocks) {
  LoadOptions lo;
  lo.backend = backend;
  auto model = load_model(dir, lo);
  const int V = model->config().vocab_size;
  EngineOptions eo;
  eo.max_running = 16;
  eo.step_tokens = 32;
  eo.kv_blocks = kv_blocks;
  eo.spec.mode = spec;
  eo.spec.steps = 2;
  Engine engine(std::move(model), eo);
  std::vector<std::vector<int32_t>> out(16);
  for (int r = 0; r < 16; ++r) {
    GenerationRequest q;
    const int n = r < 4 ? 36 + r : 3 + 2 * r;
    for (int i = 0; i < n; ++i) q.prompt.push_back(int32_t((r < 4 && i < 32 ? 7 * i + 3 : 13 * i + 5 * r + 1) % V));
    q.max_tokens = 12;
    q.ignore_eos = true;
    engine.submit(std::move(q), [&out, r](const TokenEvent& ev) {
      if (ev.token >= 0) out[r].push_back(ev.token);
      if (ev.finished && ev.finish_reason != "length") ADD_FAILURE() << "request " << r << ": " << ev.finish_reason;
    });
  }
  engine.run_until_idle();
  return out;
}

class ModelOnBackends : public ::testing::TestWithParam<Case> {};

TEST_P(ModelOnBackends, EngineOnGpuGivesTheCpuTokens) {
  const auto gpus = gpu_backends();
  if (gpus.empty()) GTEST_SKIP() << "no GPU backend with a device in this build (CI builds HIP-CPU)";
  const Case& c = GetParam();
  const std::string dir = model_dir(c.arch);
  // 40 blocks of 16 slots cannot hold 16 sequences of up to 52 tokens: the engine preempts.
  const auto want = serve(dir, "cpu", c.spec, 40);
  for (const auto& g : gpus) {
    const auto got = serve(dir, g, c.spec, 40);
    for (int r = 0; r < 16; ++r) {
      ASSERT_EQ(got[r].size(), 12u) << g << " request " << r;
      EXPECT_EQ(got[r], want[r]) << g << " request " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ModelOnBackends,
                         ::testing::Values(Case{"llama", SpecMode::ngram}, Case{"qwen3_moe", SpecMode::off},
                                           Case{"glm4_moe", SpecMode::mtp}, Case{"deepseek_v3", SpecMode::mtp}),
                         [](const auto& i) { return i.param.arch + "_" + spec_mode_name(i.param.spec); });

TEST(ModelOnBackends, ClearErrors) {
  const std::string dir = model_dir("llama");
  LoadOptions lo;
  lo.backend = "tpu";
  EXPECT_THROW(load_model(dir, lo), Error);
  lo.backend = "cuda:x";
  EXPECT_THROW(load_model(dir, lo), Error);
  // A KV pool in host memory handed to a model on a device backend is refused.
  for (const auto& g : gpu_backends()) {
    lo.backend = g;
    auto m = load_model(dir, lo);
    if (m->backend()->host_memory()) continue;
    KVPool host(m->kv_layout(), 2, 16);
    SeqKV kv;
    ASSERT_TRUE(kv.reserve(host, 4));
    Batch b;
    const int32_t toks[2] = {1, 2};
    b.add(&kv, toks, 2, 0, true);
    std::vector<float> logits(m->config().vocab_size);
    EXPECT_THROW(m->forward(b, host, logits.data()), Error);
  }
}

}  // namespace
