// A NaN in a checkpoint fails the requests it reaches, with an error, and
// nothing else: the engine keeps serving (issue 21, finding 1). Dense: one NaN
// embedding row, reached only by the prompts that hold that token. MoE: NaN
// router weights, which used to give an invalid expert id (an out-of-bounds
// write in the grouped MoE) and now route to valid experts and produce NaN
// logits, which the engine reports.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "formats/safetensors.h"
#include "models/model.h"
#include "devtools/synthetic.h"
#include "test_util.h"

using namespace mx;
namespace fs = std::filesystem;

namespace {

// A copy of synthetic `arch` (f32) with `poison`'s rows [r0, r1) set to NaN.
std::string poisoned_model(const mxtest::TempDir& dir, const std::string& arch, const std::string& poison, int64_t r0,
                           int64_t r1, const std::string& preset = "tiny") {
  const std::string clean = dir / (arch + "-clean"), bad = dir / (arch + "-poisoned");
  SyntheticSpec s;
  s.arch = arch;
  s.preset = preset;
  s.dtype = DType::F32;
  write_synthetic_model(clean, s);
  TensorStore st = load_safetensors(clean);
  std::vector<OwnedTensor> owned;
  std::vector<NamedTensor> list;
  for (const std::string& n : st.names()) {
    const Tensor& t = st.get(n);
    OwnedTensor o = OwnedTensor::make(t.dtype, t.dims());
    std::memcpy(o.t.data, t.data, t.nbytes());
    if (n == poison) {
      const int64_t cols = t.numel() / t.dim(0);
      for (int64_t i = r0 * cols; i < r1 * cols; ++i) o.t.as<float>()[i] = NAN;
    }
    owned.push_back(std::move(o));
  }
  const auto names = st.names();
  for (size_t i = 0; i < names.size(); ++i) list.push_back({names[i], owned[i].t});
  fs::create_directories(bad);
  write_safetensors_sharded(bad, list, size_t(1) << 30);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    if (fs::exists(fs::path(clean) / f)) fs::copy_file(fs::path(clean) / f, fs::path(bad) / f);
  return bad;
}

TEST(PoisonedNumbers, NanEmbeddingRowFailsOnlyTheRequestsThatReachIt) {
  mxtest::TempDir dir;
  // The small preset has an untied lm_head (a tied one would put the NaN row in every request's logits).
  const std::string m = poisoned_model(dir, "llama", "model.embed_tokens.weight", 7, 8, "small");
  EngineOptions eo;
  eo.max_running = 4;
  Engine clean(load_model(dir / "llama-clean"), eo), bad(load_model(m), eo);
  mxtest::Collected want, got;
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {4, 7, 5}, {9, 10, 11, 12}, {7}};
  for (const auto& p : prompts) {
    mxtest::submit(clean, want, p, 8);
    mxtest::submit(bad, got, p, 8);
  }
  clean.run_until_idle();
  bad.run_until_idle();
  for (uint64_t id : {1, 3}) {  // token 7 in neither prompt: served as by the clean model
    EXPECT_EQ(got.final[id].finish_reason, FinishReason::Length) << id;
    EXPECT_EQ(got.tokens[id], want.tokens[id]) << id;
  }
  for (uint64_t id : {2, 4}) {
    EXPECT_EQ(got.final[id].finish_reason, FinishReason::Error) << id << ": " << got.final[id].error;
    EXPECT_NE(got.final[id].error.find("NaN"), std::string::npos) << got.final[id].error;
  }
  // Still serving, and the KV blocks of the failed requests came back.
  const uint64_t again = mxtest::submit(bad, got, {1, 2, 3}, 8);
  bad.run_until_idle();
  EXPECT_EQ(got.tokens[again], want.tokens[1]);
  EXPECT_EQ(bad.metrics().kv_blocks_free + bad.metrics().kv_blocks_cached, bad.metrics().kv_blocks_total);
}

TEST(PoisonedNumbers, NanRouterWeightsGiveAnErrorNotACrash) {
  mxtest::TempDir dir;
  for (const char* arch : {"glm4_moe", "qwen3_moe"}) {
    const std::string m = poisoned_model(dir, arch, "model.layers.1.mlp.gate.weight", 0, 8);
    for (const char* backend : {"cpu", "hip"}) {
      if (std::string(backend) == "hip" && backend_device_count("hip") == 0) continue;
      LoadOptions lo;
      lo.backend = backend;
      Engine e(load_model(m, lo), EngineOptions{});
      mxtest::Collected got;
      for (int i = 0; i < 3; ++i) mxtest::submit(e, got, {1, 2, 3, 4}, 6);
      e.run_until_idle();
      for (uint64_t id : {1, 2, 3})
        EXPECT_EQ(got.final[id].finish_reason, FinishReason::Error) << arch << " " << backend << ": "
                                                                    << got.final[id].error;
    }
    // The CLI says so and exits 1 (it died with SIGSEGV, 139).
    auto r = mxtest::run(mxtest::mxserve() + " generate --model " + m + " --prompt-ids '1 2 3' --max-tokens 4 "
                         "--temperature 0", true);
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("NaN"), std::string::npos) << r.out;
  }
}

}  // namespace
