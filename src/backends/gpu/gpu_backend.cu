// The GPU backend: Backend (backends/backend.h) on one CUDA or HIP device, every
// op queued on the backend's own stream; download() waits for it.
#include <algorithm>
#include <string>

#include "backends/gpu/gpu_backend.h"
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/nccl_comm.h"

namespace mx {
namespace MX_GPU_NS {
namespace {

// The registry key of a device: the nearest architecture the build targets.
Isa arch_isa(const gpuDeviceProp& p) {
#if defined(MX_GPU_HIP) && !defined(MX_GPU_HIP_CPU)
  const std::string arch = p.gcnArchName;
  if (arch.rfind("gfx94", 0) == 0) return Isa::Gfx940;
  if (arch.rfind("gfx11", 0) == 0 || arch.rfind("gfx10", 0) == 0) return Isa::Gfx1030;
  return Isa::Gfx90a;
#elif defined(MX_GPU_HIP)
  return Isa::Gfx90a;
#else
  return p.major >= 9 ? Isa::Sm90 : Isa::Sm80;
#endif
}

// The device current on this thread, as this file last set it. The runtime's
// current device is per thread, and a kernel must be launched (and memory
// allocated) with its stream's device current. The engine thread, in-process
// follower ranks and data-parallel replicas each drive their own device from
// threads that did not construct the backend, so every op binds first (one
// compare when it is already current; CUDA programming guide, "Multi-Device
// System": "a kernel launch will fail if it is issued to a stream that is not
// associated to the current device").
thread_local int tl_device = -1;

class GpuBackend final : public Backend {
 public:
  explicit GpuBackend(int device) : device_(device) {
    MX_GPU_CHECK(gpuSetDevice(device));
    tl_device = device;
    MX_GPU_CHECK(gpuGetDeviceProperties(&prop_, device));
    MX_GPU_CHECK(gpuStreamCreate(&stream_));
    MX_GPU_CHECK(gpuStreamCreate(&comm_stream_));
    MX_GPU_CHECK(gpuEventCreateWithFlags(&compute_done_, gpuEventDisableTiming));
    MX_GPU_CHECK(gpuEventCreateWithFlags(&comm_done_, gpuEventDisableTiming));
    isa_ = arch_isa(prop_);
  }
  // This rank's NCCL / RCCL member on this device: its collectives run on the
  // comm stream, ordered against the compute stream by events (nccl_comm.cu).
  std::unique_ptr<DeviceComm> make_comm(const std::string& id, int rank, int size) {
    bind();
    return make_nccl_comm_on(stream_, comm_stream_, device_, id, rank, size);
  }
  ~GpuBackend() override {
    if (gpuSetDevice(device_) == gpuSuccess) tl_device = device_;  // bind(), without throwing here
    drop_graphs();
    for (void* p : ws_)
      if (p) (void)gpuFree(p);
    (void)gpuStreamSynchronize(comm_stream_);
    (void)gpuEventDestroy(compute_done_);
    (void)gpuEventDestroy(comm_done_);
    (void)gpuStreamDestroy(comm_stream_);
    (void)gpuStreamDestroy(stream_);
  }

  std::string name() const override {
#if defined(MX_GPU_HIP)
    const char* api = "hip";
#else
    const char* api = "cuda";
#endif
#if defined(MX_GPU_HIP) && !defined(MX_GPU_HIP_CPU)
    const std::string arch = prop_.gcnArchName;
#elif defined(MX_GPU_HIP)
    const std::string arch = "cpu runtime";
#else
    const std::string arch = "sm_" + std::to_string(prop_.major) + std::to_string(prop_.minor);
#endif
    return std::string(api) + ":" + std::to_string(device_) + " " + prop_.name + " (" + arch + ")";
  }
  Isa isa() const override { return isa_; }

  void* alloc(size_t bytes) override {
    bind();
    no_capture("alloc");
    void* p = nullptr;
    MX_GPU_CHECK(gpuMalloc(&p, std::max<size_t>(bytes, 256)));
    return p;
  }
  void free(void* p) override {
    bind();
    if (!p) return;
    no_capture("free");
    synchronize();  // queued work may still use it
    MX_GPU_CHECK(gpuFree(p));
  }
  void upload(void* dst, const void* src, size_t n) override {
    no_capture("upload");
    MX_GPU_CHECK(gpuMemcpyAsync(dst, src, n, gpuMemcpyHostToDevice, stream()));
    synchronize();  // src is the caller's pageable memory
  }
  void download(void* dst, const void* src, size_t n) override {
    no_capture("download");
    MX_GPU_CHECK(gpuMemcpyAsync(dst, src, n, gpuMemcpyDeviceToHost, stream()));
    synchronize();
  }
  void copy(void* dst, const void* src, size_t n) override {
    MX_GPU_CHECK(gpuMemcpyAsync(dst, src, n, gpuMemcpyDeviceToDevice, stream()));
  }
  void synchronize() override {
    no_capture("synchronize");
    MX_GPU_CHECK(gpuStreamSynchronize(stream()));
  }
  // The comm stream (backend.h): events order it against the compute stream.
  // HIP-CPU drains its streams' queues one after another on one runtime
  // thread, so a stream waiting (hipStreamWaitEvent) on an event of a stream
  // drained after it never wakes: there the host waits for the event instead
  // (the same order, without the device-side wait; found by the in-process
  // TP tests, which hung).
  void comm_begin() override {
    bind();
    MX_GPU_CHECK(gpuEventRecord(compute_done_, stream()));
#if defined(MX_GPU_HIP_CPU)
    MX_GPU_CHECK(gpuEventSynchronize(compute_done_));
#else
    MX_GPU_CHECK(gpuStreamWaitEvent(comm_stream_, compute_done_, 0));
#endif
  }
  void comm_end() override {
    bind();
    MX_GPU_CHECK(gpuEventRecord(comm_done_, comm_stream_));
#if defined(MX_GPU_HIP_CPU)
    MX_GPU_CHECK(gpuEventSynchronize(comm_done_));
#else
    MX_GPU_CHECK(gpuStreamWaitEvent(stream(), comm_done_, 0));
#endif
  }
  void comm_download(void* dst, const void* src, size_t n) override {
    no_capture("download");
    bind();
    MX_GPU_CHECK(gpuMemcpyAsync(dst, src, n, gpuMemcpyDeviceToHost, comm_stream_));
    MX_GPU_CHECK(gpuStreamSynchronize(comm_stream_));  // the comm stream alone
  }
  void comm_upload(void* dst, const void* src, size_t n) override {
    no_capture("upload");
    bind();
    MX_GPU_CHECK(gpuMemcpyAsync(dst, src, n, gpuMemcpyHostToDevice, comm_stream_));
    MX_GPU_CHECK(gpuStreamSynchronize(comm_stream_));  // src is pageable: done before it is reused
  }

  void matmul_with_config(float* y, const float* x, const DevWeight& w, int64_t T,
                          const KernelConfig& cfg) override {
    if (w.experts != 1) throw std::runtime_error("gpu matmul: a stack of experts is not one matrix");
    launch_matmul(stream(), y, x, w, T, cfg);
  }
  void rmsnorm_strided(float* y, const float* x, const float* w, int64_t rows, int dim, int64_t stride,
                       float eps) override {
    launch_rmsnorm(stream(), y, x, w, rows, dim, stride, eps);
  }
  void copy_rows(float* dst, int64_t ds, const float* src, int64_t ss, int64_t rows, int64_t width) override {
    launch_copy_rows(stream(), dst, ds, src, ss, rows, width);
  }
  // Per head: gather its inputs into a dense block, one matmul, scatter the outputs.
  void head_matmul(float* y, int64_t ys, int64_t yhs, const float* x, int64_t xs, int64_t xhs,
                   const std::vector<DevWeight>& w, int64_t T) override {
    int64_t in = 0, out = 0;
    for (const DevWeight& h : w) in = std::max(in, h.in), out = std::max(out, h.out);
    float* xin = workspace<float>(0, size_t(T) * (in + out) * 4);
    float* yout = xin + T * in;
    for (size_t h = 0; h < w.size(); ++h) {
      launch_copy_rows(stream(), xin, w[h].in, x + h * xhs, xs, T, w[h].in);
      matmul(yout, xin, w[h], T);
      launch_copy_rows(stream(), y + h * yhs, ys, yout, w[h].out, T, w[h].out);
    }
  }
  void add_bias(float* x, const float* b, int64_t rows, int dim) override { launch_add_bias(stream(), x, b, rows, dim); }
  void silu_mul(float* y, const float* g, const float* u, int64_t n) override { launch_silu_mul(stream(), y, g, u, n); }
  void add(float* x, const float* y, int64_t n) override { launch_add(stream(), x, y, n); }
  void embed(float* x, const DevWeight& table, const int32_t* ids, int64_t T) override {
    launch_embed(stream(), x, table, ids, T);
  }
  void rope(float* x, const int32_t* pos, int64_t T, int n_heads, int token_stride, int head_stride,
            const RopeArgs& r) override {
    launch_rope(stream(), x, pos, T, n_heads, token_stride, head_stride, r);
  }
  void kv_write(const PagedKV& kv, const float* k, int k_stride, const float* v, int v_stride, const int32_t* slots,
                int64_t T) override {
    launch_kv_write(stream(), kv, k, k_stride, v, v_stride, slots, T);
  }
  void paged_attention(float* out, const float* q, int q_stride, const PagedKV& kv, const AttnArgs& a,
                       const int32_t* block_tables, int max_blocks, const int32_t* seq, const int32_t* pos,
                       int64_t T) override {
    launch_paged_attention(stream(), out, q, q_stride, kv, a, block_tables, max_blocks, seq, pos, T);
  }
  void prefill_attention(float* out, const float* q, int q_stride, const PagedKV& kv, const AttnArgs& a,
                         const int32_t* block_table, int start_pos, int64_t n_q) override {
    launch_prefill_attention(stream(), out, q, q_stride, kv, a, block_table, start_pos, n_q);
  }
  void moe_route(int32_t* ids, float* w, const float* logits, int64_t T, const RouteArgs& r) override {
    launch_moe_route(stream(), ids, w, logits, T, r);
  }
  void moe_ffn(float* out, const float* x, const int32_t* ids, const float* weights, int64_t T, int k,
               const ExpertWeights& w) override {
    const DevWeight gate = stack(w.gate), up = stack(w.up), down = stack(w.down);
    const size_t need = moe_workspace_bytes(T, k, gate.experts, gate.in, gate.out);
    launch_moe_ffn(stream(), workspace<char>(1, need), out, x, ids, weights, T, k, gate, up, down);
    if (!w.has_shared()) return;
    // The shared expert, weight 1, added after the routed ones (the CPU adds the
    // routed ones to it: equal up to rounding).
    const int64_t H = w.shared_gate.out, D = w.shared_down.out;
    float* g = workspace<float>(0, size_t(T) * (2 * H + D) * 4);
    float* u = g + T * H;
    float* y = u + T * H;
    matmul(g, x, w.shared_gate, T);
    matmul(u, x, w.shared_up, T);
    launch_silu_mul(stream(), g, g, u, T * H);
    matmul(y, g, w.shared_down, T);
    launch_add(stream(), out, y, T * D);
  }
  void fill_uniform_block(void* dst, DType dtype, size_t rows, size_t cols, size_t stride, uint64_t first, float lo,
                          float hi, uint64_t seed) override {
    launch_fill_uniform(stream(), dst, dtype, rows, cols, stride, first, lo, hi, seed);
  }
  void argmax(int32_t* ids, const float* logits, int64_t rows, int vocab) override {
    launch_argmax(stream(), ids, logits, rows, vocab);
  }
  void sample(int32_t* ids, const float* logits, int64_t rows, int vocab, float temperature, uint64_t seed) override {
    if (!(temperature > 0)) throw std::runtime_error("gpu sample: temperature must be > 0");
    launch_sample(stream(), ids, logits, rows, vocab, temperature, seed);
  }

#if defined(MX_GPU_GRAPHS)
  uint64_t capture_graph(const std::function<void()>& body) override {
    gpuGraph_t g = nullptr;
    MX_GPU_CHECK(gpuStreamBeginCapture(stream(), gpuStreamCaptureModeThreadLocal));
    capturing_ = true;
    try {
      body();
      capturing_ = false;
    } catch (...) {
      capturing_ = false;
      (void)gpuStreamEndCapture(stream(), &g);  // leave capture mode before the error goes on
      if (g) (void)gpuGraphDestroy(g);
      (void)gpuGetLastError();
      throw;
    }
    MX_GPU_CHECK(gpuStreamEndCapture(stream(), &g));
    gpuGraphExec_t e = nullptr;
    const gpuError_t err = gpuGraphInstantiateWithFlags(&e, g, 0);
    (void)gpuGraphDestroy(g);
    MX_GPU_CHECK(err);
    graphs_.push_back(e);
    return graphs_.size();
  }
  void replay_graph(uint64_t id) override {
    if (id == 0 || id > graphs_.size() || !graphs_[id - 1]) throw std::runtime_error("gpu replay_graph: unknown graph");
    MX_GPU_CHECK(gpuGraphLaunch(graphs_[id - 1], stream()));
  }
  void drop_graphs() override {
    if (graphs_.empty()) return;
    (void)gpuStreamSynchronize(stream());
    for (gpuGraphExec_t& e : graphs_)
      if (e) (void)gpuGraphExecDestroy(e);
    graphs_.clear();
  }
#endif

 private:
  // What a graph cannot hold (capture_graph's contract): a clear error, and the
  // caller runs the step without a graph.
  void no_capture(const char* what) const {
    if (capturing_) throw std::runtime_error(std::string("gpu: ") + what + " while capturing a graph");
  }
  // The experts of one projection as one stack: they must be contiguous (the
  // model uploads them so, models/weights.h).
  static DevWeight stack(const std::vector<DevWeight>& v) {
    if (v.empty()) throw std::runtime_error("gpu moe_ffn: no experts");
    DevWeight s = v[0];
    s.experts = int(v.size());
    for (size_t e = 0; e < v.size(); ++e) {
      const bool ok = v[e].data == static_cast<char*>(s.data) + e * s.data_bytes() &&
                      (!s.scales || v[e].scales == static_cast<char*>(s.scales) + e * s.scale_bytes()) &&
                      v[e].dtype == s.dtype && v[e].out == s.out && v[e].in == s.in;
      if (!ok)
        throw std::runtime_error("gpu moe_ffn: expert " + std::to_string(e) +
                                 " is not where a contiguous stack puts it (every expert must be on this device, "
                                 "uploaded as one stack)");
    }
    return s;
  }
  // This backend's device made current on the calling thread (see tl_device).
  void bind() const {
    if (tl_device == device_) return;
    MX_GPU_CHECK(gpuSetDevice(device_));
    tl_device = device_;
  }
  // The stream every op enqueues on, with its device bound first.
  gpuStream_t stream() const {
    bind();
    return stream_;
  }
  // Scratch buffer `slot` of at least `bytes`, grown to the largest request seen.
  template <class T>
  T* workspace(int slot, size_t bytes) {
    if (bytes > ws_bytes_[slot]) {
      if (ws_[slot]) free(ws_[slot]);
      ws_[slot] = alloc(bytes);
      ws_bytes_[slot] = bytes;
    }
    return static_cast<T*>(ws_[slot]);
  }

  int device_;
  gpuDeviceProp prop_{};
  gpuStream_t stream_{};
  // Collectives' stream and the events ordering it against stream_ (backend.h comm_begin).
  gpuStream_t comm_stream_{};
  gpuEvent_t compute_done_{}, comm_done_{};
  Isa isa_ = Isa::Sm90;
  void* ws_[2] = {nullptr, nullptr};  // 0: head_matmul / shared expert, 1: moe_ffn
  bool capturing_ = false;
#if defined(MX_GPU_GRAPHS)
  std::vector<gpuGraphExec_t> graphs_;  // id i is graphs_[i - 1]
#endif
  size_t ws_bytes_[2] = {0, 0};
};

}  // namespace

int device_count() {
  int n = 0;
  if (gpuGetDeviceCount(&n) != gpuSuccess) {
    (void)gpuGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::unique_ptr<Backend> make_backend(int device) { return std::make_unique<GpuBackend>(device); }

std::unique_ptr<DeviceComm> make_nccl_comm(Backend& b, const std::string& id, int rank, int size) {
  auto* g = dynamic_cast<GpuBackend*>(&b);
  if (!g) throw std::runtime_error("nccl: backend " + b.name() + " is not a device of this GPU build");
  return g->make_comm(id, rank, size);
}

}  // namespace MX_GPU_NS
}  // namespace mx
