#pragma once
// A compute backend: where tensors live and where the ops of a transformer
// block run. The CPU backend (backends/cpu/cpu_backend.cpp) runs the CPU kernels
// on host memory; the GPU backend (backends/gpu/, one source for CUDA and HIP)
// runs device kernels on device memory. Both implement the same ops with the
// same argument layouts, so a test runs an op on both and compares, and the
// model code (models/, written once against Backend) runs on either.
//
// Every pointer an op takes is this backend's memory (alloc/upload). Activations
// are dense f32 rows. Weight matrices are [out, in] row-major as in HF
// checkpoints, in the formats backends/cpu/matmul.h documents (F32, BF16, MXFP4
// with E8M0 block scales, F8_E4M3 with 128x128 f32 block scales), or a stack of
// `experts` such matrices (MoE), expert e at e * (its bytes).
//
// This header is plain C++ over the standard library: nvcc and hipcc compile
// the GPU backend against it.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "backends/registry.h"

namespace mx {

struct DevWeight {
  DType dtype = DType::F32;
  int64_t out = 0, in = 0;
  int experts = 1;            // > 1: a stack of experts matrices of [out, in]
  void* data = nullptr;
  void* scales = nullptr;     // MXFP4: E8M0 [out, in/32] per expert; F8_E4M3: f32 [ceil(out/128), ceil(in/128)]
  int64_t scale_cols = 0;     // F8_E4M3: ceil(in/128)
  // A router gate: BF16 weights multiply the f32 activations even where the
  // backend would round activations to bf16 (backends/cpu/matmul.h, Bf16Act).
  bool f32_activations = false;
  // Bytes of one expert's data / scales (the stride between experts). Inline:
  // the GPU libraries use them and link nothing of the rest.
  size_t data_bytes() const {
    const size_t n = size_t(out) * size_t(in);
    switch (dtype) {
      case DType::F32: return n * 4;
      case DType::BF16: case DType::F16: return n * 2;
      case DType::MXFP4: return n / 2;
      default: return n;  // F8_E4M3, and the 1-byte integer types
    }
  }
  size_t scale_bytes() const {
    if (dtype == DType::MXFP4) return size_t(out) * size_t(in / 32);
    if (dtype == DType::F8_E4M3 && scales) return size_t((out + 127) / 128) * size_t(scale_cols) * 4;
    return 0;
  }
};

// Rotary embedding of the first rotary_dim dims of each head (models/rope.h;
// the CPU math: backends/cpu/ops.h rope_rotate): inv_freq[rotary_dim/2] in backend memory, angles pos * inv_freq.
struct RopeArgs {
  int rotary_dim = 0;
  bool interleaved = false;  // false: dim i pairs with i + rotary_dim/2 (rotate_half)
  float mscale = 1.0f;       // yarn attention factor on cos and sin
  const float* inv_freq = nullptr;
};

// Router of an MoE layer (models/moe.h): sigmoid with correction bias and
// grouped top-k (DeepSeek-V3, GLM-4.5) or softmax top-k (Qwen3-MoE).
struct RouteArgs {
  int n_experts = 0, k = 0;
  bool sigmoid = false;
  int n_group = 1, topk_group = 1;
  bool norm_topk = true;
  float scaling = 1.0f;
  const float* bias = nullptr;  // e_score_correction_bias [n_experts] or null
};

// Paged KV cache of one layer (models/kv_cache.h): position p of a sequence is
// slot block_table[p / block_size] * block_size + p % block_size; a slot holds
// k_width values of K and v_width values of V. kv head g's key is at g * head_dim.
// Values are stored as `dtype`: F32, BF16 or F8_E4M3 (unscaled, i.e. a scale of
// 1 as vLLM's fp8 cache has without calibrated k/v scales), written from f32
// by kv_write and read back to f32 by attention (kv_load / kv_store).
struct PagedKV {
  void* k = nullptr;
  void* v = nullptr;
  int k_width = 0, v_width = 0, block_size = 16;
  DType dtype = DType::F32;
};

MX_HD inline float kv_load(const void* base, DType t, int64_t i) {
  if (t == DType::BF16) return from_bf16(static_cast<const uint16_t*>(base)[i]);
  if (t == DType::F8_E4M3) return from_e4m3(static_cast<const uint8_t*>(base)[i]);
  return static_cast<const float*>(base)[i];
}
MX_HD inline void kv_store(void* base, DType t, int64_t i, float v) {
  if (t == DType::BF16) static_cast<uint16_t*>(base)[i] = to_bf16(v);
  else if (t == DType::F8_E4M3) static_cast<uint8_t*>(base)[i] = to_e4m3(v);
  else static_cast<float*>(base)[i] = v;
}

// head_dim is the query/key width of a head; v_dim the value width (0: head_dim).
// values_in_k: MLA's latent cache, where a kv head's value is the first v_dim
// floats of its key (kv.v unused).
struct AttnArgs {
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
  int v_dim = 0;
  bool values_in_k = false;
  int vd() const { return v_dim ? v_dim : head_dim; }
};

// The experts of one MoE layer: routed expert e's three matrices (data null for
// an expert another rank holds under expert parallelism), plus the shared
// expert, which every token takes with weight 1 (data null when there is none).
// A GPU backend needs each projection's experts contiguous in one allocation
// (expert e at e * data_bytes()); stacked() makes such views.
struct ExpertWeights {
  std::vector<DevWeight> gate, up, down;
  DevWeight shared_gate, shared_up, shared_down;
  int n_experts() const { return int(gate.size()); }
  bool has_shared() const { return shared_gate.data != nullptr; }
  // Views of stacks of experts (DevWeight::experts > 1) as per-expert matrices.
  static ExpertWeights stacked(const DevWeight& gate, const DevWeight& up, const DevWeight& down);
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // e.g. "cpu (avx512)", "cuda:0 NVIDIA H200 (sm_90)"
  // The registry key the backend's kernels are tuned under (CPU ISA or GPU arch).
  virtual Isa isa() const = 0;

  // Memory. alloc'd bytes are 256-byte aligned; free(nullptr) does nothing.
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* p) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void synchronize() = 0;
  // True when backend memory is host memory (the CPU backend): host code and
  // the host communicators (comm/comm.h) may then touch it directly.
  virtual bool host_memory() const { return false; }

  // Collectives on a stream of their own (issue 23; docs/parallelism.md,
  // "Streams"). A backend with streams (CUDA, HIP, HIP-CPU) keeps a second,
  // communication stream beside the compute stream every op above runs on, and
  // orders the two by events only (CUDA programming guide, "Stream
  // Synchronization": cudaStreamWaitEvent; NCCL user guide, "CUDA Stream
  // Semantics"): comm_begin() makes the comm stream wait for the compute work
  // enqueued so far; comm_end() makes the compute work enqueued after it wait
  // for the comm stream's work so far. A host-staged collective is
  //   comm_begin(); comm_download(...); <host collective>; comm_upload(...); comm_end();
  // so the host waits for the comm stream's copy alone and never synchronizes
  // the compute stream; a device communicator (backends/device_comm.h) does the
  // same bracketing itself. Backends without streams (the CPU): no-ops, and the
  // copies are download() / upload().
  virtual void comm_begin() {}
  virtual void comm_end() {}
  // On the comm stream; both return when the copy is done (the host reads dst
  // next; src is the caller's pageable staging memory).
  virtual void comm_download(void* dst, const void* src, size_t bytes) { download(dst, src, bytes); }
  virtual void comm_upload(void* dst, const void* src, size_t bytes) { upload(dst, src, bytes); }

  // y[t, o] = sum_i x[t, i] W[o, i], t < n_tokens. The tile config comes from the
  // tuned-kernel registry (op "matmul" on CPU, "gpu_matmul" on GPU): an untuned
  // shape warns, counts and fails under --strict-kernels as on CPU.
  virtual void matmul(float* y, const float* x, const DevWeight& w, int64_t n_tokens);
  virtual void matmul_with_config(float* y, const float* x, const DevWeight& w, int64_t n_tokens,
                                  const KernelConfig& cfg) = 0;
  // matmul(ys[i], x, *ws[i], n_tokens) for n weights that read the same x (q, k and v;
  // gate and up), the same results in one call: the CPU prepares x once and joins its
  // threads once (backends/cpu/matmul.h). Here: one matmul after another.
  virtual void matmul_many(float* const* ys, const float* x, const DevWeight* const* ws, int n, int64_t n_tokens);

  // y[r] = x[r] / rms(x[r]) * w (w: f32 [dim]) over the first dim floats of
  // rows `stride` floats apart (x and y alike); y may equal x.
  void rmsnorm(float* y, const float* x, const float* w, int64_t rows, int dim, float eps) {
    rmsnorm_strided(y, x, w, rows, dim, dim, eps);
  }
  virtual void rmsnorm_strided(float* y, const float* x, const float* w, int64_t rows, int dim, int64_t stride,
                               float eps) = 0;
  // dst[r * dst_stride + i] = src[r * src_stride + i] for r < rows, i < width (floats).
  virtual void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
                         int64_t width) = 0;
  // One matrix per head (MLA's absorption): for h < w.size(), t < n_tokens,
  // y[t * y_stride + h * y_head_stride + o] = sum_i w[h][o, i] x[t * x_stride + h * x_head_stride + i].
  virtual void head_matmul(float* y, int64_t y_stride, int64_t y_head_stride, const float* x, int64_t x_stride,
                           int64_t x_head_stride, const std::vector<DevWeight>& w, int64_t n_tokens) = 0;
  // x[r] += b (b: f32 [dim]).
  virtual void add_bias(float* x, const float* b, int64_t rows, int dim) = 0;
  // y = silu(g) * u;  x += y  (n elements).
  virtual void silu_mul(float* y, const float* g, const float* u, int64_t n) = 0;
  virtual void add(float* x, const float* y, int64_t n) = 0;
  // x[t] = table[ids[t]] as f32 (table: F32 or BF16 [vocab, dim]); ids in backend memory.
  // An id of -1 gives a zero row (a vocab-parallel rank's token held by another
  // rank); any other id outside [0, vocab) is the caller's bug (the CPU throws,
  // a GPU writes row 0 rather than read out of bounds).
  virtual void embed(float* x, const DevWeight& table, const int32_t* ids, int64_t n_tokens) = 0;
  // Rotates token t's n_heads vectors (x + t * token_stride + h * head_stride) for position pos[t].
  virtual void rope(float* x, const int32_t* pos, int64_t n_tokens, int n_heads, int token_stride,
                    int head_stride, const RopeArgs& r) = 0;

  // Writes token t's K (k + t * k_stride, k_width floats) and V into cache slot slots[t].
  virtual void kv_write(const PagedKV& kv, const float* k, int k_stride, const float* v, int v_stride,
                        const int32_t* slots, int64_t n_tokens) = 0;
  // Attention of any batch (decode steps and prefill chunks mixed): query token t
  // (q + t * q_stride, n_heads x head_dim) of sequence seq[t] attends causally to
  // positions 0..pos[t] of that sequence's cache (block_tables + seq * max_blocks);
  // out: [T, n_heads * vd()]. Each (token, head) is computed on its own: the
  // result does not depend on the rest of the batch.
  virtual void paged_attention(float* out, const float* q, int q_stride, const PagedKV& kv,
                               const AttnArgs& a, const int32_t* block_tables, int max_blocks,
                               const int32_t* seq, const int32_t* pos, int64_t n_tokens) = 0;
  // Prefill attention (flash-style on GPU): n_q consecutive query tokens of one
  // sequence at positions start_pos.., over its cache (which already holds them);
  // GQA only (no v_dim / values_in_k). The model forward does not call it yet
  // (docs/gpu.md): paged_attention serves every batch.
  virtual void prefill_attention(float* out, const float* q, int q_stride, const PagedKV& kv,
                                 const AttnArgs& a, const int32_t* block_table, int start_pos,
                                 int64_t n_q) = 0;

  // MoE routing from router logits [T, n_experts]: ids [T, k] ascending, weights [T, k].
  virtual void moe_route(int32_t* ids, float* weights, const float* logits, int64_t n_tokens,
                         const RouteArgs& r) = 0;
  // out[t] = shared(x_t) + sum_i weights[t, i] * down_e(silu(gate_e x_t) * up_e x_t),
  // e = ids[t, i], summed in ascending expert order (tokens are grouped by
  // expert and each expert runs one grouped GEMM over its tokens). gate/up of
  // an expert: [H, D], down: [D, H]; shared() the same SwiGLU on its own weights.
  virtual void moe_ffn(float* out, const float* x, const int32_t* ids, const float* weights,
                       int64_t n_tokens, int k, const ExpertWeights& w) = 0;
  // Expert parallelism's half of moe_ffn (models/moe.h): pair p runs row
  // in_row[p] of x through routed expert expert[p] into slots + p * D, and the
  // shared expert (when w has one) maps xs [ts rows] to outs. Backends whose
  // memory is not host memory refuse it (expert parallel runs on the CPU).
  virtual void moe_pairs(float* slots, const float* x, const int32_t* in_row, const int32_t* expert,
                         int64_t n_pairs, const ExpertWeights& w, const float* xs, float* outs, int64_t ts);

  // --load-format dummy's weights (models/dummy_weights.h): n elements of dtype
  // at dst, element i drawn from (seed, i) by backends/fill_impl.h, so every
  // backend makes the same tensor. F32, BF16, F8_E4M3: uniform reals in
  // [lo, hi); U8: uniform integers in [lo, hi] (E2M1 pairs, E8M0 scales).
  void fill_uniform(void* dst, DType dtype, size_t n, float lo, float hi, uint64_t seed) {
    fill_uniform_block(dst, dtype, 1, n, n, 0, lo, hi, seed);
  }
  // Part of such a tensor, as a tensor-parallel rank loads its slice
  // (models/device_weights.h): rows x cols elements written densely at dst,
  // entry (r, c) being the tensor's element first + r * stride + c, so a rank's
  // rows or columns of a dummy weight equal those rows or columns of the whole.
  virtual void fill_uniform_block(void* dst, DType dtype, size_t rows, size_t cols, size_t stride, uint64_t first,
                                  float lo, float hi, uint64_t seed) = 0;

  // Graphs (CUDA / HIP): capture_graph runs `body`, which enqueues ops on this
  // backend, in capture mode: the ops are recorded, not run, and replay_graph(id)
  // then runs them all in one launch, with the arguments they had (so every
  // pointer they read must hold the new step's data by then). While capturing,
  // `body` must not synchronize, allocate, free or copy to or from the host.
  // Returns 0 where the backend has no graphs (the CPU, HIP-CPU): the caller
  // then runs its ops as they come.
  virtual uint64_t capture_graph(const std::function<void()>& body) { return 0; }
  virtual void replay_graph(uint64_t id) {}
  virtual void drop_graphs() {}  // every captured graph (their ids become invalid)

  // ids[r] = argmax of logits row r (the lowest index among equal maxima).
  virtual void argmax(int32_t* ids, const float* logits, int64_t rows, int vocab) = 0;
  // ids[r] drawn from softmax(logits[r] / temperature) (Gumbel-max over a
  // counter-based generator keyed by (seed, r)); temperature > 0.
  virtual void sample(int32_t* ids, const float* logits, int64_t rows, int vocab, float temperature,
                      uint64_t seed) = 0;
};

// Backends this binary has: "cpu" always, "cuda" and "hip" when built with
// -DMXSERVE_CUDA=ON / -DMXSERVE_HIP=ON.
std::vector<std::string> compiled_backends();
// A backend spec "kind" or "kind:N" (cpu, cuda:1, hip:0) split into its kind
// and device number (0 when absent); a device that is not a number is an error.
struct BackendSpec {
  std::string kind;
  int device = 0;
};
BackendSpec parse_backend_spec(const std::string& spec);

// Devices a GPU backend sees (0 when it is not compiled or finds no device or driver).
int backend_device_count(const std::string& kind);
// "cpu", "cuda", "cuda:1", "hip", "hip:0". Throws mx::Error when the backend is
// not compiled in or has no such device (the message says which). The CPU
// backend runs on `pool` (null: the process-wide pool).
class ThreadPool;
std::unique_ptr<Backend> make_backend(const std::string& spec, ThreadPool* pool = nullptr);
// A backend kind made by `make` (tests: a CPU backend that records graphs, so
// the model's graph discipline is checked where no GPU is); make_backend(kind)
// then returns it. The built-in kinds cannot be replaced.
using BackendFactory = std::function<std::unique_ptr<Backend>(ThreadPool*)>;
void register_backend(const std::string& kind, BackendFactory make);

// Backend-memory buffer owned by value.
class DevBuffer {
 public:
  DevBuffer() = default;
  DevBuffer(Backend& b, size_t bytes) : b_(&b), p_(b.alloc(bytes)), n_(bytes) {}
  DevBuffer(DevBuffer&& o) noexcept : b_(o.b_), p_(o.p_), n_(o.n_) { o.p_ = nullptr; }
  DevBuffer& operator=(DevBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      b_ = o.b_, p_ = o.p_, n_ = o.n_;
      o.p_ = nullptr;
    }
    return *this;
  }
  ~DevBuffer() { reset(); }
  void reset() {
    if (p_) b_->free(p_);
    p_ = nullptr;
  }
  template <class T = void>
  T* get() const { return static_cast<T*>(p_); }
  size_t bytes() const { return n_; }

 private:
  Backend* b_ = nullptr;
  void* p_ = nullptr;
  size_t n_ = 0;
};

// Bump allocator over one backend buffer (core/arena.h's contract, in backend
// memory): per-forward activations, reset at the start of each forward.
class DevArena {
 public:
  explicit DevArena(Backend& b) : b_(&b) {}
  // Grows (geometrically) only when empty, between forwards.
  void reserve(size_t bytes);
  void reset() { used_ = 0; }
  size_t mark() const { return used_; }
  void rewind(size_t m) { used_ = m; }
  size_t capacity() const { return buf_.bytes(); }
  const void* base() const { return buf_.get(); }  // changes when reserve() grows
  template <class T = float>
  T* alloc(size_t n) {
    const size_t bytes = (n * sizeof(T) + 255) / 256 * 256;
    if (used_ + bytes > buf_.bytes()) overflow(used_ + bytes);
    T* p = reinterpret_cast<T*>(buf_.get<char>() + used_);
    used_ += bytes;
    return p;
  }

 private:
  [[noreturn]] void overflow(size_t need) const;
  Backend* b_;
  DevBuffer buf_;
  size_t used_ = 0;
};

}  // namespace mx
