// One model definition on every backend (models/decoder.h over backends/backend.h):
// the serving engine on a GPU backend gives each request the CPU backend's
// greedy tokens, with continuous batching, chunked prefill, the prefix cache,
// preemption (a KV pool too small for all requests at once) and speculative
// decoding, for a dense GQA, two MoE and an MLA family. In CI the GPU backend
// is HIP on the HIP-CPU runtime (CMake MXSERVE_HIP_CPU), so every GPU kernel
// runs there; on a machine with a GPU the same tests run on it.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "engine/engine.h"
#include "engine/generate.h"
#include "backends/gpu_test_util.h"
#include "backends/backend.h"
#include "models/model.h"
#include "devtools/synthetic.h"

using namespace mx;
namespace fs = std::filesystem;

namespace {

struct Case {
  std::string arch;
  SpecMode spec;
  std::string kv_dtype;  // the same on both backends
};
std::ostream& operator<<(std::ostream& o, const Case& c) {
  return o << c.arch << " " << spec_mode_name(c.spec) << " kv " << c.kv_dtype;
}

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

using mxtest::gpu_backends;  // "hip" on HIP-CPU in CI

// 16 requests at once: four share a long prefix (prefix cache hits), prompts of
// 3..40 tokens (chunked prefill with step_tokens 32), 12 new tokens each.
std::vector<std::vector<int32_t>> serve(const std::string& dir, const std::string& backend, SpecMode spec,
                                        int kv_blocks, const std::string& kv_dtype = "f32", LoadOptions lo = {}) {
  lo.backend = backend;
  auto model = load_model(dir, lo);
  const int V = model->config().vocab_size;
  EngineOptions eo;
  eo.max_running = 16;
  eo.step_tokens = 32;
  eo.kv_blocks = kv_blocks;
  eo.spec.mode = spec;
  eo.spec.steps = 2;
  eo.kv_dtype = kv_dtype;
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
      if (ev.finished && ev.finish_reason != FinishReason::Length)
        ADD_FAILURE() << "request " << r << ": " << describe(ev.finish_reason, ev.error);
    });
  }
  engine.run_until_idle();
  return out;
}

class ModelOnBackends : public ::testing::TestWithParam<Case> {};

TEST_P(ModelOnBackends, EngineOnGpuGivesTheCpuTokens) {
  const auto gpus = gpu_backends();
  MXTEST_NEEDS_GPU_BACKEND(gpus);
  const Case& c = GetParam();
  const std::string dir = model_dir(c.arch);
  // 40 blocks of 16 slots cannot hold 16 sequences of up to 52 tokens: the engine preempts.
  const auto want = serve(dir, "cpu", c.spec, 40, c.kv_dtype);
  for (const auto& g : gpus) {
    const auto got = serve(dir, g, c.spec, 40, c.kv_dtype);
    for (int r = 0; r < 16; ++r) {
      ASSERT_EQ(got[r].size(), 12u) << g << " request " << r;
      EXPECT_EQ(got[r], want[r]) << g << " request " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ModelOnBackends,
                         ::testing::Values(Case{"llama", SpecMode::ngram, "bf16"}, Case{"qwen3_moe", SpecMode::off, "f32"},
                                           Case{"glm4_moe", SpecMode::mtp, "fp8"},
                                           Case{"deepseek_v3", SpecMode::mtp, "bf16"}),
                         [](const auto& i) {
                           return i.param.arch + "_" + spec_mode_name(i.param.spec) + "_kv_" + i.param.kv_dtype;
                         });

// A bf16 / fp8 KV cache changes a model's numbers a little, not what it says:
// on the CPU, the llama tiny model's 16 requests mostly give the f32 cache's tokens.
TEST(KvCacheDtype, RoundedCachesKeepMostGreedyTokens) {
  const std::string dir = model_dir("llama");
  const auto f32 = serve(dir, "cpu", SpecMode::off, 40, "f32");
  for (const char* dt : {"bf16", "fp8"}) {
    const auto got = serve(dir, "cpu", SpecMode::off, 40, dt);
    int same = 0;
    for (int r = 0; r < 16; ++r)
      for (size_t i = 0; i < got[r].size() && i < f32[r].size() && got[r][i] == f32[r][i]; ++i) ++same;
    std::printf("[ kv       ] %s: %d of 192 tokens before the first difference equal the f32 cache's\n", dt, same);
    EXPECT_GE(same, std::string(dt) == "bf16" ? 150 : 60) << dt;
  }
  EXPECT_THROW(serve(dir, "cpu", SpecMode::off, 40, "int4"), Error);
}

// --load-format dummy: the model from config.json alone has every parameter a
// checkpoint of the family has (same names, shapes; the format --dummy-dtype
// says), and it is the same model on every backend.
TEST(DummyLoad, BindsWhatACheckpointHolds) {
  for (const char* arch : {"glm4_moe", "deepseek_v3", "qwen3_moe", "llama"}) {
    const std::string dir = model_dir(arch);
    auto real = load_model(dir);
    LoadOptions lo;
    lo.load_format = "dummy";
    lo.dummy_dtype = "f32";
    auto dummy = load_model(dir, lo);
    // Optional tensors are not made: the MTP layer's own copies of embed_tokens
    // and shared_head.head (GLM-4.6 stores none and shares the main model's).
    std::map<std::string, std::string> want, got;
    int64_t optional_params = 0;
    const std::string mtp = fmt::format("model.layers.{}.", real->config().num_hidden_layers);
    for (const auto& b : real->weight_map()) {
      if (b.checkpoint_name == mtp + "embed_tokens.weight" || b.checkpoint_name == mtp + "shared_head.head.weight") {
        optional_params += b.params;
        continue;
      }
      want[b.checkpoint_name] = b.shape;
    }
    for (const auto& b : dummy->weight_map()) got[b.checkpoint_name] = b.shape;
    EXPECT_EQ(got, want) << arch;
    EXPECT_EQ(dummy->parameter_count(), real->parameter_count() - optional_params) << arch;
    // MXFP4: every Linear quantized except router gates, lm_head and the MTP layer (quantize's defaults).
    lo.dummy_dtype = "mxfp4";
    auto q = load_model(dir, lo);
    int mx = 0;
    for (const auto& b : q->weight_map()) {
      if (b.linear.empty() || b.params == 0) continue;
      const bool kept = b.linear == "lm_head" || (b.linear.size() > 9 && b.linear.substr(b.linear.size() - 9) == ".mlp.gate") ||
                        b.linear.rfind(fmt::format("model.layers.{}.", q->config().num_hidden_layers), 0) == 0;
      EXPECT_EQ(b.dtype, kept ? DType::BF16 : DType::MXFP4) << arch << " " << b.checkpoint_name;
      mx += b.dtype == DType::MXFP4;
    }
    EXPECT_GT(mx, 0) << arch;
    // Every format gives finite logits.
    for (const char* dt : {"bf16", "fp8", "mxfp4"}) {
      lo.dummy_dtype = dt;
      auto m = load_model(dir, lo);
      const auto l = prompt_logits(*m, {1, 2, 3, 4, 5});
      for (float x : l) ASSERT_TRUE(std::isfinite(x)) << arch << " " << dt;
    }
  }
}

TEST(DummyLoad, SameModelOnEveryBackend) {
  const auto gpus = gpu_backends();
  MXTEST_NEEDS_GPU_BACKEND(gpus);
  LoadOptions lo;
  lo.load_format = "dummy";
  lo.dummy_dtype = "f32";
  lo.dummy_seed = 3;
  for (const char* arch : {"glm4_moe", "deepseek_v3"}) {
    const std::string cfg = model_dir(arch) + "/config.json";
    const auto want = serve(cfg, "cpu", SpecMode::mtp, 40, "f32", lo);
    for (const auto& g : gpus) EXPECT_EQ(serve(cfg, g, SpecMode::mtp, 40, "f32", lo), want) << arch << " " << g;
  }
}

TEST(DummyLoad, ClearErrors) {
  const std::string dir = model_dir("llama");
  LoadOptions lo;
  lo.load_format = "dummy";
  lo.dummy_dtype = "int3";
  EXPECT_THROW(load_model(dir, lo), Error);
  lo.dummy_dtype = "";
  EXPECT_THROW(load_model(dir + "/no-such", lo), Error);
  lo.hf_overrides = "{not json";
  EXPECT_THROW(load_model(dir, lo), Error);
  lo.hf_overrides = "[1]";
  EXPECT_THROW(load_model(dir, lo), Error);
  lo.hf_overrides = R"({"num_hidden_layers": 1})";
  EXPECT_EQ(load_model(dir, lo)->config().num_hidden_layers, 1);
  lo.mtp_head = dir + "/model.safetensors";
  EXPECT_THROW(load_model(dir, lo), Error);
  LoadOptions plain;
  plain.dummy_dtype = "bf16";  // without --load-format dummy
  EXPECT_THROW(load_model(dir, plain), Error);
  plain.dummy_dtype = "";
  plain.load_format = "lazy";
  EXPECT_THROW(load_model(dir, plain), Error);
}

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
