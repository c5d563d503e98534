// Sharded loading (issue 23): a tensor- or expert-parallel rank reads only its
// share of the checkpoint and places it on its device (models/device_weights.h
// LoadStats counts the bytes read from each checkpoint tensor), on the CPU and
// on every GPU backend with a device (HIP-CPU in CI), for a real checkpoint and
// for --load-format dummy, while the greedy ids stay those of one rank.
//
// What each rank must read, by checkpoint tensor (B = the tensor's bytes):
//  - TP 2: attention q/k/v/o (GQA) and q_b/kv_b/o (MLA) projections and their
//    biases, every MLP projection (dense, routed and shared experts), the
//    embedding and the LM head: B / 2 on each rank; the rest (norms, router,
//    MLA's latent projections, MTP's eh_proj) B on each.
//  - EP 2: routed expert e: B on rank e / (E / 2), nothing on the other; the
//    rest B on each.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <regex>

#include "engine/generate.h"
#include "formats/tensor_store.h"
#include "backends/gpu_test_util.h"
#include "models/device_weights.h"
#include "parallel/parallel_model.h"
#include "model_test_util.h"
#include "test_util.h"

using namespace mx;

namespace {

std::vector<int32_t> greedy(Model& m, const std::vector<int32_t>& prompt, int n) {
  GenerateOptions o;
  o.max_tokens = n;
  o.ignore_eos = true;
  o.sampling.temperature = 0;
  return generate(m, prompt, o).tokens;
}

std::vector<std::string> devices() {
  std::vector<std::string> d{"cpu"};
  for (const std::string& g : mxtest::gpu_backends()) d.push_back(g);
  return d;
}

const std::regex kTpSplit(
    R"(.*(self_attn\.(q_proj|k_proj|v_proj|o_proj|q_b_proj|kv_b_proj)|mlp\.(experts\.\d+\.|shared_experts\.)?(gate_proj|up_proj|down_proj)).*|.*embed_tokens\.weight|lm_head\.weight|.*shared_head\.head\.weight)");
const std::regex kExpert(R"(.*\.mlp\.experts\.(\d+)\..*)");

// Checks every tensor's per-rank reads against the rules above; `whole` is one
// unsharded rank's reads (which the caller checked cover the checkpoint).
void expect_shares(const LoadStats& whole, const std::vector<const LoadStats*>& ranks, bool tp, int experts,
                   const std::string& what) {
  const int P = int(ranks.size());
  ASSERT_EQ(P, 2) << what;
  for (const LoadStats* r : ranks) ASSERT_TRUE(r) << what;
  auto read = [&](int r, const std::string& n) {
    auto it = ranks[r]->read_by_tensor.find(n);
    return it == ranks[r]->read_by_tensor.end() ? uint64_t(0) : it->second;
  };
  int split = 0, replicated = 0;
  for (const auto& [name, bytes] : whole.read_by_tensor) {
    std::smatch m;
    if (tp && std::regex_match(name, kTpSplit)) {
      ++split;
      for (int r = 0; r < P; ++r) EXPECT_EQ(read(r, name), bytes / P) << what << ": " << name << " on rank " << r;
    } else if (!tp && std::regex_match(name, m, kExpert)) {
      ++split;
      const int owner = std::stoi(m[1].str()) / (experts / P);
      for (int r = 0; r < P; ++r)
        EXPECT_EQ(read(r, name), r == owner ? bytes : 0) << what << ": " << name << " on rank " << r;
    } else {
      ++replicated;
      for (int r = 0; r < P; ++r) EXPECT_EQ(read(r, name), bytes) << what << ": " << name << " on rank " << r;
    }
  }
  EXPECT_GT(split, 0) << what;
  EXPECT_GT(replicated, 0) << what;
  for (int r = 0; r < P; ++r) {
    // Nothing else was read, and the rank read less than the whole model.
    EXPECT_EQ(ranks[r]->read_by_tensor.size(), size_t(std::count_if(
        whole.read_by_tensor.begin(), whole.read_by_tensor.end(), [&](const auto& kv) { return read(r, kv.first) > 0; })))
        << what;
    EXPECT_LT(ranks[r]->read_bytes, whole.read_bytes) << what;
    std::printf("[ %s ] rank %d: %s\n", what.c_str(), r, ranks[r]->describe().c_str());
  }
  std::printf("[ %s ] one rank: %s\n", what.c_str(), whole.describe().c_str());
}

}  // namespace

TEST(ShardLoading, EachRankReadsOnlyItsShareOfTheCheckpoint) {
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 5, 250, 3, 8, 77, 123, 64, 2};
  for (const char* arch : {"glm4_moe", "deepseek_v3"}) {
    mxtest::TempDir d;
    mxtest::make_synthetic(d.path().string(), arch, DType::F32);  // the backends agree to rounding
    const int experts = load_checkpoint(d.path().string()).config.moe.n_routed_experts;
    auto cpu = load_model(d.path().string());
    const auto want = greedy(*cpu, prompt, 12);
    for (const std::string& dev : devices()) {
      LoadOptions lo;
      lo.backend = dev;
      auto one = load_model(d.path().string(), lo);
      ASSERT_TRUE(one->load_stats());
      const LoadStats& whole = *one->load_stats();
      // One rank reads every tensor it binds once, all of it.
      const Checkpoint ck = load_checkpoint(d.path().string());
      for (const auto& [name, bytes] : whole.read_by_tensor)
        EXPECT_EQ(bytes, ck.tensors->get(name).nbytes()) << arch << " on " << dev << ": " << name;
      EXPECT_GT(whole.read_by_tensor.size(), ck.tensors->size() / 2) << arch;
      EXPECT_EQ(whole.checkpoint_bytes, ck.tensors->total_bytes()) << arch;
      for (auto [tp, ep] : {std::pair{2, 1}, std::pair{1, 2}}) {
        const std::string what = fmt::format("{} {} --tp {} --ep {}", arch, dev, tp, ep);
        ParallelOptions po;
        po.tp = tp, po.ep = ep, po.backend = "local", po.device = dev;
        auto par = load_parallel_model(d.path().string(), po);
        auto* pm = dynamic_cast<ParallelModel*>(par.get());
        ASSERT_TRUE(pm) << what;
        expect_shares(whole, pm->rank_load_stats(), tp > 1, experts, what);
        if (dev != "cpu") {
          for (const LoadStats* r : pm->rank_load_stats()) EXPECT_EQ(r->host_copy_bytes, 0u) << what;
        }
        EXPECT_EQ(greedy(*par, prompt, 12), want) << what;
      }
    }
  }
}

// --load-format dummy: each rank makes only its share (a row or column slice
// of a dummy weight is made on the device, never the whole tensor), and the
// slices are those of the whole dummy model: the greedy ids are one rank's.
TEST(ShardLoading, DummyWeightsAreMadeOnlyForTheRanksShare) {
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 5, 250, 3, 8, 77, 123, 64, 2};
  for (const char* arch : {"glm4_moe", "deepseek_v3"}) {
    mxtest::TempDir d;
    mxtest::make_synthetic(d.path().string(), arch, DType::BF16);
    const int experts = load_checkpoint(d.path().string()).config.moe.n_routed_experts;
    LoadOptions lo;
    lo.load_format = "dummy", lo.dummy_dtype = "f32";
    auto cpu = load_model(d.path().string(), lo);
    const auto want = greedy(*cpu, prompt, 12);
    for (const std::string& dev : devices()) {
      lo.backend = dev;
      auto one = load_model(d.path().string(), lo);
      ASSERT_TRUE(one->load_stats());
      const LoadStats& whole = *one->load_stats();
      EXPECT_EQ(whole.read_bytes, whole.checkpoint_bytes) << arch << " on " << dev;
      if (dev != "cpu") {
        EXPECT_GT(whole.filled_bytes, 0u) << arch << " on " << dev;
      }
      for (auto [tp, ep] : {std::pair{2, 1}, std::pair{1, 2}}) {
        const std::string what = fmt::format("dummy {} {} --tp {} --ep {}", arch, dev, tp, ep);
        ParallelOptions po;
        po.tp = tp, po.ep = ep, po.backend = "local", po.device = dev;
        auto par = load_parallel_model(d.path().string(), po, lo);
        auto* pm = dynamic_cast<ParallelModel*>(par.get());
        ASSERT_TRUE(pm) << what;
        expect_shares(whole, pm->rank_load_stats(), tp > 1, experts, what);
        EXPECT_EQ(greedy(*par, prompt, 12), want) << what;
      }
    }
  }
}

// A dummy tensor's block fill is the same bits as those elements of the whole
// fill, on every backend (what lets a rank make only its slice).
TEST(ShardLoading, BlockFillEqualsThatPartOfTheWholeFill) {
  for (const std::string& dev : devices()) {
    auto b = make_backend(dev);
    for (DType dt : {DType::F32, DType::BF16, DType::F8_E4M3, DType::U8}) {
      const size_t rows = 7, cols = 40, es = dtype_bits(dt) / 8, r0 = 2, c0 = 8, nr = 4, nc = 24;
      DevBuffer whole(*b, rows * cols * es), part(*b, nr * nc * es);
      b->fill_uniform(whole.get(), dt, rows * cols, -0.5f, 0.5f, 91);
      b->fill_uniform_block(part.get(), dt, nr, nc, cols, r0 * cols + c0, -0.5f, 0.5f, 91);
      std::vector<uint8_t> w(rows * cols * es), p(nr * nc * es);
      b->download(w.data(), whole.get(), w.size());
      b->download(p.data(), part.get(), p.size());
      for (size_t r = 0; r < nr; ++r)
        EXPECT_EQ(std::memcmp(p.data() + r * nc * es, w.data() + ((r0 + r) * cols + c0) * es, nc * es), 0)
            << dev << " " << dtype_name(dt) << " row " << r;
    }
  }
}
