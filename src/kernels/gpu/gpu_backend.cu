// The GPU backend: Backend (kernels/backend.h) on one CUDA or HIP device, every
// op queued on the backend's own stream; download() waits for it.
#include <algorithm>
#include <string>

#include "kernels/gpu/gpu_backend.h"
#include "kernels/gpu/gpu_kernels.h"

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

class GpuBackend final : public Backend {
 public:
  explicit GpuBackend(int device) : device_(device) {
    MX_GPU_CHECK(gpuSetDevice(device));
    MX_GPU_CHECK(gpuGetDeviceProperties(&prop_, device));
    MX_GPU_CHECK(gpuStreamCreate(&stream_));
    isa_ = arch_isa(prop_);
  }
  ~GpuBackend() override {
    if (workspace_) (void)gpuFree(workspace_);
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
    void* p = nullptr;
    MX_GPU_CHECK(gpuMalloc(&p, std::max<size_t>(bytes, 256)));
    return p;
  }
  void free(void* p) override {
    if (!p) return;
    synchronize();  // queued work may still use it
    MX_GPU_CHECK(gpuFree(p));
  }
  void upload(void* dst, const void* src, size_t n) override {
    MX_GPU_CHECK(gpuMemcpyAsync(dst, src, n, gpuMemcpyHostToDevice, stream_));
    synchronize();  // src is the caller's pageable memory
  }
  void download(void* dst, const void* src, size_t n) override {
    MX_GPU_CHECK(gpuMemcpyAsync(dst, src, n, gpuMemcpyDeviceToHost, stream_));
    synchronize();
  }
  void copy(void* dst, const void* src, size_t n) override {
    MX_GPU_CHECK(gpuMemcpyAsync(dst, src, n, gpuMemcpyDeviceToDevice, stream_));
  }
  void synchronize() override { MX_GPU_CHECK(gpuStreamSynchronize(stream_)); }

  void matmul_with_config(float* y, const float* x, const DevWeight& w, int64_t T,
                          const KernelConfig& cfg) override {
    if (w.experts != 1) throw std::runtime_error("gpu matmul: a stack of experts is not one matrix");
    launch_matmul(stream_, y, x, w, T, cfg);
  }
  void rmsnorm(float* y, const float* x, const float* w, int64_t rows, int dim, float eps) override {
    launch_rmsnorm(stream_, y, x, w, rows, dim, eps);
  }
  void add_bias(float* x, const float* b, int64_t rows, int dim) override { launch_add_bias(stream_, x, b, rows, dim); }
  void silu_mul(float* y, const float* g, const float* u, int64_t n) override { launch_silu_mul(stream_, y, g, u, n); }
  void add(float* x, const float* y, int64_t n) override { launch_add(stream_, x, y, n); }
  void embed(float* x, const DevWeight& table, const int32_t* ids, int64_t T) override {
    launch_embed(stream_, x, table, ids, T);
  }
  void rope(float* x, const int32_t* pos, int64_t T, int n_heads, int token_stride, int head_stride,
            const RopeArgs& r) override {
    launch_rope(stream_, x, pos, T, n_heads, token_stride, head_stride, r);
  }
  void kv_write(const PagedKV& kv, const float* k, int k_stride, const float* v, int v_stride, const int32_t* slots,
                int64_t T) override {
    launch_kv_write(stream_, kv, k, k_stride, v, v_stride, slots, T);
  }
  void paged_attention(float* out, const float* q, int q_stride, const PagedKV& kv, const AttnArgs& a,
                       const int32_t* block_tables, int max_blocks, const int32_t* seq, const int32_t* pos,
                       int64_t T) override {
    launch_paged_attention(stream_, out, q, q_stride, kv, a, block_tables, max_blocks, seq, pos, T);
  }
  void prefill_attention(float* out, const float* q, int q_stride, const PagedKV& kv, const AttnArgs& a,
                         const int32_t* block_table, int start_pos, int64_t n_q) override {
    launch_prefill_attention(stream_, out, q, q_stride, kv, a, block_table, start_pos, n_q);
  }
  void moe_route(int32_t* ids, float* w, const float* logits, int64_t T, const RouteArgs& r) override {
    launch_moe_route(stream_, ids, w, logits, T, r);
  }
  void moe_ffn(float* out, const float* x, const int32_t* ids, const float* weights, int64_t T, int k,
               const DevWeight& gate, const DevWeight& up, const DevWeight& down) override {
    const size_t need = moe_workspace_bytes(T, k, gate.experts, gate.in, gate.out);
    if (need > workspace_bytes_) {  // grows to the largest batch seen, then stays
      if (workspace_) free(workspace_);
      workspace_ = alloc(need);
      workspace_bytes_ = need;
    }
    launch_moe_ffn(stream_, workspace_, out, x, ids, weights, T, k, gate, up, down);
  }
  void argmax(int32_t* ids, const float* logits, int64_t rows, int vocab) override {
    launch_argmax(stream_, ids, logits, rows, vocab);
  }
  void sample(int32_t* ids, const float* logits, int64_t rows, int vocab, float temperature, uint64_t seed) override {
    if (!(temperature > 0)) throw std::runtime_error("gpu sample: temperature must be > 0");
    launch_sample(stream_, ids, logits, rows, vocab, temperature, seed);
  }

 private:
  int device_;
  gpuDeviceProp prop_{};
  gpuStream_t stream_{};
  Isa isa_ = Isa::Sm90;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
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

}  // namespace MX_GPU_NS
}  // namespace mx
