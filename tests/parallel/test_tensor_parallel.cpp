// Tensor / expert parallel with in-process ranks (threads) against one rank:
// greedy tokens identical; expert parallel alone bitwise identical logits;
// tensor parallel within float rounding of the partial-sum allreduce. The same
// comparison under `mpirun -np 2` is tests/parallel/mpi_parallel_test.sh.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/engine.h"
#include "engine/generate.h"
#include "devtools/synthetic.h"
#include "parallel/parallel_model.h"
#include "backends/gpu_test_util.h"
#include "test_util.h"

using namespace mx;

namespace {
std::string make(const mxtest::TempDir& d, const std::string& arch) {
  SyntheticSpec s;
  s.arch = arch;
  s.dtype = DType::BF16;
  s.seed = 5;
  write_synthetic_model(d.path().string(), s);
  return d.path().string();
}

std::vector<int32_t> greedy(Model& m, const std::vector<int32_t>& prompt, int n) {
  GenerateOptions o;
  o.max_tokens = n;
  o.ignore_eos = true;
  o.sampling.temperature = 0;
  return generate(m, prompt, o).tokens;
}

struct Case {
  std::string arch;
  int tp, ep;
};
std::string name(const ::testing::TestParamInfo<Case>& i) {
  return i.param.arch + "_tp" + std::to_string(i.param.tp) + "_ep" + std::to_string(i.param.ep);
}
class Parallel : public ::testing::TestWithParam<Case> {};
}  // namespace

TEST_P(Parallel, GreedyTokensMatchOneRank) {
  const Case c = GetParam();
  mxtest::TempDir d;
  const std::string dir = make(d, c.arch);
  auto one = load_model(dir);
  ParallelOptions po;
  po.tp = c.tp, po.ep = c.ep, po.backend = "local";
  auto par = load_parallel_model(dir, po);
  ASSERT_TRUE(dynamic_cast<ParallelModel*>(par.get()));
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 5, 250, 3, 8, 77, 123, 64, 2, 9, 31, 200, 11, 12};
  EXPECT_EQ(greedy(*par, prompt, 24), greedy(*one, prompt, 24));
  auto a = prompt_logits(*one, prompt, true), b = prompt_logits(*par, prompt, true);
  ASSERT_EQ(a.size(), b.size());
  float maxdiff = 0;
  for (size_t i = 0; i < a.size(); ++i) maxdiff = std::max(maxdiff, std::fabs(a[i] - b[i]));
  std::printf("[ %s tp %d ep %d ] max |logit difference| over %zu logits: %g\n", c.arch.c_str(), c.tp, c.ep,
              a.size(), maxdiff);
  if (c.tp == 1) {
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "EP must be bitwise exact";
  }
  EXPECT_LT(maxdiff, 1e-3);
  // Per-rank KV really shrinks under TP: the leader's layout holds its heads
  // only (MLA's latent cache is per token, not per head: every rank keeps it).
  if (c.tp > 1 && c.arch != "deepseek_v3") {
    EXPECT_EQ(par->kv_layout().k_width * c.tp, one->kv_layout().k_width);
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, Parallel,
                         ::testing::Values(Case{"glm4_moe", 2, 1}, Case{"glm4_moe", 1, 2}, Case{"glm4_moe", 2, 2},
                                           Case{"qwen3_moe", 2, 1}, Case{"qwen3_moe", 1, 2},
                                           Case{"qwen3_moe", 2, 2}, Case{"qwen3", 2, 1},
                                           Case{"deepseek_v3", 1, 2}, Case{"deepseek_v3", 2, 1},
                                           Case{"deepseek_v3", 2, 2}),
                         name);

// Issue 23's fallback for GPU ranks: tensor parallel on a device backend
// (HIP-CPU in CI) with host-staged collectives (download, the host
// communicator, upload) gives one CPU rank's tokens, for a dense model with a
// vocab-parallel tied head, a TP-split MoE and MLA.
TEST(ParallelModel, TensorParallelOnAGpuBackendGivesOneCpuRanksTokens) {
  const auto gpus = mxtest::gpu_backends();
  MXTEST_NEEDS_GPU_BACKEND(gpus);
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 5, 250, 3, 8, 77, 123, 64, 2};
  for (const char* arch : {"qwen3", "glm4_moe", "deepseek_v3"}) {
    mxtest::TempDir d;
    SyntheticSpec s;
    s.arch = arch;
    s.dtype = DType::F32;  // the backends agree to rounding
    write_synthetic_model(d.path().string(), s);
    auto one = load_model(d.path().string());
    const auto want = greedy(*one, prompt, 16);
    for (const std::string& g : gpus) {
      ParallelOptions po;
      po.tp = 2, po.backend = "local", po.device = g;
      auto par = load_parallel_model(d.path().string(), po);
      EXPECT_EQ(greedy(*par, prompt, 16), want) << arch << " on " << g;
    }
  }
}

// Expert parallel on a device backend (HIP-CPU in CI): the dispatch and combine
// all-to-alls and the output allgather are host-staged (models/moe.h), each
// rank's experts run as one grouped moe_ffn over its own expert stack; alone
// and with TP attention, for GLM-4.5's MoE (shared expert) and DeepSeek-V3's
// (MLA, grouped routing), against one CPU rank's greedy tokens.
TEST(ParallelModel, ExpertParallelOnAGpuBackendGivesOneCpuRanksTokens) {
  const auto gpus = mxtest::gpu_backends();
  MXTEST_NEEDS_GPU_BACKEND(gpus);
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 5, 250, 3, 8, 77, 123, 64, 2};
  for (const char* arch : {"glm4_moe", "deepseek_v3"}) {
    mxtest::TempDir d;
    SyntheticSpec s;
    s.arch = arch;
    s.dtype = DType::F32;  // the backends agree to rounding
    write_synthetic_model(d.path().string(), s);
    auto one = load_model(d.path().string());
    const auto want = greedy(*one, prompt, 16);
    for (const std::string& g : gpus)
      for (int tp : {1, 2}) {
        ParallelOptions po;
        po.tp = tp, po.ep = 2, po.backend = "local", po.device = g;
        auto par = load_parallel_model(d.path().string(), po);
        EXPECT_EQ(greedy(*par, prompt, 16), want) << arch << " on " << g << " --tp " << tp << " --ep 2";
      }
  }
}

TEST(ParallelModel, EngineDrivesTheShardsLikeOneModel) {
  mxtest::TempDir d;
  const std::string dir = make(d, "glm4_moe");
  ParallelOptions po;
  po.tp = 2, po.ep = 2, po.backend = "local";
  auto run = [&](std::unique_ptr<Model> m) {
    EngineOptions eo;
    eo.kv_blocks = 64;
    Engine e(std::move(m), eo);
    std::vector<std::vector<int32_t>> out(4);
    for (int i = 0; i < 4; ++i) {
      GenerationRequest r;
      for (int j = 0; j < 20 + 7 * i; ++j) r.prompt.push_back((j * 31 + i) % 300 + 1);
      r.max_tokens = 12;
      r.ignore_eos = true;
      e.submit(r, [&out, i](const TokenEvent& ev) {
        if (ev.token >= 0) out[i].push_back(ev.token);
      });
    }
    e.run_until_idle();
    return out;
  };
  EXPECT_EQ(run(load_parallel_model(dir, po)), run(load_model(dir)));
}

TEST(ParallelModel, HeadsThatDoNotSplitAreAClearError) {
  mxtest::TempDir d;
  const std::string dir = make(d, "glm4_moe");
  ParallelOptions po;
  po.tp = 3, po.backend = "local";  // 4 heads
  try {
    load_parallel_model(dir, po);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot split 4 attention heads over 3 ranks"), std::string::npos)
        << e.what();
  }
}

TEST(ParallelModel, BadOptionsAreRejected) {
  ParallelOptions po;
  po.tp = 2, po.ep = 4;
  EXPECT_THROW(po.validate(), Error);
  po.ep = 2, po.backend = "gloo";  // not a communicator mxserve has
  EXPECT_THROW(po.validate(), Error);
  po.backend = "nccl";  // device collectives (issue 23): valid options; where they cannot run, load says so
  EXPECT_NO_THROW(po.validate());
  po.replica = -1;
  EXPECT_THROW(po.validate(), Error);
}

TEST(ParallelModel, CommunicationIsCounted) {
  mxtest::TempDir d;
  const std::string dir = make(d, "glm4_moe");
  for (auto [tp, ep] : {std::pair{2, 1}, std::pair{1, 2}}) {
    ParallelOptions po;
    po.tp = tp, po.ep = ep, po.backend = "local";
    auto m = load_parallel_model(dir, po);
    auto* pm = dynamic_cast<ParallelModel*>(m.get());
    pm->reset_stats();
    greedy(*m, {1, 2, 3, 4}, 4);
    auto st = pm->group_stats();
    ASSERT_EQ(st.size(), 2u);
    uint64_t ar = 0, a2a = 0;
    for (auto& s : st) ar += s.bytes[size_t(CommOp::AllReduce)], a2a += s.bytes[size_t(CommOp::AllToAll)];
    if (tp > 1) {
      EXPECT_GT(ar, 0u);
    }
    if (ep > 1) {
      EXPECT_GT(a2a, 0u);
      EXPECT_EQ(ar, 0u);
    }
    std::printf("[ tp %d ep %d ] %s\n", tp, ep, describe_comm(st, 8).c_str());
  }
}
