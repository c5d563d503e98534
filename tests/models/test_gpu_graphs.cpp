// --gpu-graphs: decode steps replayed as captured graphs give the tokens of the
// steps run as they come. CI has no CUDA/HIP graph (HIP-CPU has no graph API),
// so the check runs on a CPU backend that records graphs the way a GPU stream
// capture does: in capture mode every op is recorded with the arguments it was
// called with, not run; a replay runs the recording; anything a capture cannot
// hold (host copies, allocation, synchronisation) throws. A model that read
// per-step data from anywhere but the addresses its graph captured, or changed
// its arena layout between capture and replay, gives other tokens here.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "engine/engine.h"
#include "backends/backend.h"
#include "models/model.h"
#include "devtools/synthetic.h"

using namespace mx;
namespace fs = std::filesystem;

namespace {

class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(ThreadPool* pool) : in_(make_backend("cpu", pool)) {}
  static inline int replays = 0, captures = 0;

  std::string name() const override { return "recording graphs over " + in_->name(); }
  Isa isa() const override { return in_->isa(); }
  bool host_memory() const override { return true; }
  void* alloc(size_t n) override { return host("alloc"), in_->alloc(n); }
  void free(void* p) override { host("free"), in_->free(p); }
  void upload(void* d, const void* s, size_t n) override { host("upload"), in_->upload(d, s, n); }
  void download(void* d, const void* s, size_t n) override { host("download"), in_->download(d, s, n); }
  void synchronize() override { host("synchronize"); }
  void copy(void* d, const void* s, size_t n) override { op([=, this] { in_->copy(d, s, n); }); }

  uint64_t capture_graph(const std::function<void()>& body) override {
    capturing_ = true;
    rec_.clear();
    try {
      body();
    } catch (...) {
      capturing_ = false;
      throw;
    }
    capturing_ = false;
    graphs_.push_back(std::move(rec_));
    ++captures;
    return graphs_.size();
  }
  void replay_graph(uint64_t id) override {
    for (auto& f : graphs_.at(id - 1)) f();
    ++replays;
  }
  void drop_graphs() override { graphs_.clear(); }

  void matmul(float* y, const float* x, const DevWeight& w, int64_t T) override {
    op([=, this] { in_->matmul(y, x, w, T); });
  }
  void matmul_with_config(float* y, const float* x, const DevWeight& w, int64_t T, const KernelConfig& c) override {
    op([=, this] { in_->matmul_with_config(y, x, w, T, c); });
  }
  void rmsnorm_strided(float* y, const float* x, const float* w, int64_t r, int d, int64_t s, float e) override {
    op([=, this] { in_->rmsnorm_strided(y, x, w, r, d, s, e); });
  }
  void copy_rows(float* d, int64_t ds, const float* s, int64_t ss, int64_t r, int64_t w) override {
    op([=, this] { in_->copy_rows(d, ds, s, ss, r, w); });
  }
  void head_matmul(float* y, int64_t ys, int64_t yh, const float* x, int64_t xs, int64_t xh,
                   const std::vector<DevWeight>& w, int64_t T) override {
    op([=, this] { in_->head_matmul(y, ys, yh, x, xs, xh, w, T); });
  }
  void add_bias(float* x, const float* b, int64_t r, int d) override { op([=, this] { in_->add_bias(x, b, r, d); }); }
  void silu_mul(float* y, const float* g, const float* u, int64_t n) override {
    op([=, this] { in_->silu_mul(y, g, u, n); });
  }
  void add(float* x, const float* y, int64_t n) override { op([=, this] { in_->add(x, y, n); }); }
  void embed(float* x, const DevWeight& t, const int32_t* ids, int64_t T) override {
    op([=, this] { in_->embed(x, t, ids, T); });
  }
  void rope(float* x, const int32_t* pos, int64_t T, int h, int ts, int hs, const RopeArgs& r) override {
    op([=, this] { in_->rope(x, pos, T, h, ts, hs, r); });
  }
  void kv_write(const PagedKV& kv, const float* k, int ks, const float* v, int vs, const int32_t* sl,
                int64_t T) override {
    op([=, this] { in_->kv_write(kv, k, ks, v, vs, sl, T); });
  }
  void paged_attention(float* o, const float* q, int qs, const PagedKV& kv, const AttnArgs& a, const int32_t* bt,
                       int mb, const int32_t* seq, const int32_t* pos, int64_t T) override {
    op([=, this] { in_->paged_attention(o, q, qs, kv, a, bt, mb, seq, pos, T); });
  }
  void prefill_attention(float* o, const float* q, int qs, const PagedKV& kv, const AttnArgs& a, const int32_t* bt,
                         int sp, int64_t n) override {
    op([=, this] { in_->prefill_attention(o, q, qs, kv, a, bt, sp, n); });
  }
  void moe_route(int32_t* ids, float* w, const float* l, int64_t T, const RouteArgs& r) override {
    op([=, this] { in_->moe_route(ids, w, l, T, r); });
  }
  void moe_ffn(float* o, const float* x, const int32_t* ids, const float* w, int64_t T, int k,
               const ExpertWeights& e) override {
    op([=, this] { in_->moe_ffn(o, x, ids, w, T, k, e); });
  }
  void fill_uniform_block(void* d, DType t, size_t rows, size_t cols, size_t stride, uint64_t first, float lo,
                          float hi, uint64_t s) override {
    op([=, this] { in_->fill_uniform_block(d, t, rows, cols, stride, first, lo, hi, s); });
  }
  void argmax(int32_t* ids, const float* l, int64_t r, int v) override { op([=, this] { in_->argmax(ids, l, r, v); }); }
  void sample(int32_t* ids, const float* l, int64_t r, int v, float t, uint64_t s) override {
    op([=, this] { in_->sample(ids, l, r, v, t, s); });
  }

 private:
  void host(const char* what) const {
    if (capturing_) throw Error(std::string("recording backend: ") + what + " while capturing a graph");
  }
  void op(std::function<void()> f) {
    if (capturing_) rec_.push_back(std::move(f));
    else f();
  }
  std::unique_ptr<Backend> in_;
  bool capturing_ = false;
  std::vector<std::function<void()>> rec_;
  std::vector<std::vector<std::function<void()>>> graphs_;
};

std::string model_dir(const std::string& arch) {
  const fs::path d = fs::temp_directory_path() / ("mx_graphs_" + arch + "_" + std::to_string(::getpid()));
  if (!fs::exists(d / "config.json")) {
    SyntheticSpec s;
    s.arch = arch;
    write_synthetic_model(d.string(), s);
  }
  return d.string();
}

// 12 requests at once, 32 new tokens each, with MTP drafting where the model has a layer.
std::vector<std::vector<int32_t>> run(const std::string& dir, const std::string& backend, bool graphs,
                                      const std::string& kv_dtype) {
  LoadOptions lo;
  lo.backend = backend;
  lo.gpu_graphs = graphs;
  auto model = load_model(dir, lo);
  const bool mtp = model->num_mtp_layers() > 0;
  EngineOptions eo;
  eo.max_running = 12;
  eo.step_tokens = 48;
  eo.kv_dtype = kv_dtype;
  eo.spec.mode = mtp ? SpecMode::mtp : SpecMode::off;
  eo.spec.steps = 2;
  Engine engine(std::move(model), eo);
  std::vector<std::vector<int32_t>> out(12);
  for (int r = 0; r < 12; ++r) {
    GenerationRequest q;
    for (int i = 0; i < 5 + 3 * r; ++i) q.prompt.push_back(int32_t((11 * i + 7 * r + 2) % 300));
    q.max_tokens = 32;
    q.ignore_eos = true;
    engine.submit(std::move(q), [&out, r](const TokenEvent& ev) {
      if (ev.token >= 0) out[r].push_back(ev.token);
    });
  }
  engine.run_until_idle();
  return out;
}

TEST(GpuGraphs, ReplayedDecodeStepsGiveTheEagerTokens) {
  register_backend("recording", [](ThreadPool* p) { return std::make_unique<RecordingBackend>(p); });
  for (const char* arch : {"llama", "glm4_moe", "deepseek_v3"}) {
    const std::string dir = model_dir(arch);
    const auto want = run(dir, "cpu", false, "bf16");
    RecordingBackend::replays = RecordingBackend::captures = 0;
    const auto got = run(dir, "recording", true, "bf16");
    EXPECT_EQ(got, want) << arch;
    std::printf("[ graphs   ] %s: %d graphs captured, %d replays\n", arch, RecordingBackend::captures,
                RecordingBackend::replays);
    EXPECT_GT(RecordingBackend::captures, 0) << arch;
    EXPECT_GE(RecordingBackend::replays, 8) << arch;
  }
}

TEST(GpuGraphs, NoEffectWithoutGraphs) {
  // The CPU backend has none: the flag runs every step as it comes.
  const std::string dir = model_dir("llama");
  EXPECT_EQ(run(dir, "cpu", true, "f32"), run(dir, "cpu", false, "f32"));
  EXPECT_THROW(register_backend("cpu", nullptr), Error);
}

}  // namespace
