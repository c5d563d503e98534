// `mxserve serve --backend hip` (HIP-CPU in CI; a real device where there is
// one) answers concurrent requests exactly as `mxserve serve` on the CPU: the
// same binary and flags, only --backend differs. The model is the tiny GLM-4.5
// MoE with its MTP layer drafting (f32 weights: the backends agree to rounding).
#include <gtest/gtest.h>

#include <future>

#include "devtools/loadgen/server_process.h"
#include "backends/gpu_test_util.h"
#include "server_test_util.h"

using namespace mxtest;

namespace {

// 16 concurrent greedy completions of token-id prompts (4 share a prefix); each one's token ids.
std::vector<std::vector<int32_t>> ask_16(int port) {
  std::vector<std::future<std::vector<int32_t>>> fs;
  for (int r = 0; r < 16; ++r)
    fs.push_back(std::async(std::launch::async, [port, r] {
      std::vector<int32_t> prompt;
      const int n = r < 4 ? 30 + r : 3 + 2 * r;
      for (int i = 0; i < n; ++i) prompt.push_back((r < 4 && i < 28 ? 7 * i + 3 : 13 * i + 5 * r + 1) % 300);
      const HttpResult res = post(port, "/v1/completions",
                                  {{"prompt", prompt}, {"max_tokens", 10}, {"temperature", 0}, {"ignore_eos", true}});
      EXPECT_EQ(res.status, 200) << res.body;
      return res.status == 200 ? ids_of(res.j["choices"][0]["token_ids"]) : std::vector<int32_t>{};
    }));
  std::vector<std::vector<int32_t>> out;
  for (auto& f : fs) out.push_back(f.get());
  return out;
}

std::vector<std::vector<int32_t>> serve_and_ask(const std::string& model, const std::string& backend,
                                                const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"--model", model, "--backend", backend, "--threads", "1", "--speculative", "mtp",
                                   "--spec-steps", "2", "--kv-dtype", "f32", "--max-running", "16"};
  args.insert(args.end(), extra.begin(), extra.end());
  const std::string log = (fs::temp_directory_path() / ("mx_serve_" + backend + ".log")).string();
  mx::bench::ServerProcess server(mxserve(), args, log, 120);
  return ask_16(server.port());
}

// The CPU server's answers, then each GPU backend's, which must be the same.
void expect_servers_agree(const std::string& model, const std::vector<std::string>& extra = {}) {
  const auto want = serve_and_ask(model, "cpu", extra);
  for (int r = 0; r < 16; ++r) ASSERT_EQ(want[r].size(), 10u) << "request " << r;
  for (const auto& g : gpu_backends()) {
    const auto got = serve_and_ask(model, g, extra);
    for (int r = 0; r < 16; ++r) EXPECT_EQ(got[r], want[r]) << g << " request " << r;
  }
}

TEST(ServeOnBackends, GpuServerAnswersAsTheCpuServer) {
  MXTEST_NEEDS_GPU_BACKEND(gpu_backends());
  TempDir dir;
  mx::SyntheticSpec s;
  s.arch = "glm4_moe";
  s.dtype = mx::DType::F32;
  mx::write_synthetic_model(dir.path().string(), s);
  expect_servers_agree(dir.path().string());
}

TEST(ServeOnBackends, DummyWeightsServeTheSameModelOnEveryBackend) {
  // --load-format dummy from config.json alone: the weights are drawn on each
  // backend by the same generator, so the servers answer alike.
  MXTEST_NEEDS_GPU_BACKEND(gpu_backends());
  TempDir dir;
  mx::SyntheticSpec s;
  s.arch = "deepseek_v3";
  mx::write_synthetic_model(dir.path().string(), s);
  expect_servers_agree((dir.path() / "config.json").string(),
                       {"--load-format", "dummy", "--dummy-dtype", "f32", "--dummy-seed", "5"});
}

}  // namespace
