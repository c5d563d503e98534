// The CPU backend: Backend's ops on host memory, through the CPU kernels
// (backends/cpu/matmul.h, ops.h) on one thread pool. It is what the model code
// runs on by default, so these are the fast paths: the tuned GEMV/GEMM tiles,
// tiled paged attention (backends/cpu/attention.h), and the
// grouped MoE with every active expert (and the shared one) a work item. It is
// also the reference the GPU backends are compared with (tests/backends/test_backend.cpp).
//
// Batch invariance (backends/cpu/matmul.h): every op computes a row, a (token,
// head) or an expert pair on its own, in an order that does not depend on the
// batch or the thread count.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "core/arena.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "backends/backend.h"
#include "backends/cpu/attention.h"
#include "backends/cpu/matmul.h"
#include "backends/cpu/ops.h"
#include "backends/fill_impl.h"
#include "backends/route_impl.h"
#include "backends/sample_impl.h"

namespace mx {
namespace {

// A backend weight (host memory here) as the CPU kernels' Tensor.
Tensor view(const DevWeight& w) {
  MX_CHECK(w.experts == 1, "matmul: a stack of {} experts is not one matrix", w.experts);
  Tensor t(w.dtype, {w.out, w.in}, w.data);
  t.scales = w.scales;
  return t;
}
Bf16Act act(const DevWeight& w) { return w.f32_activations ? Bf16Act::F32 : Bf16Act::Auto; }

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(ThreadPool& pool) : pool_(pool) {}
  std::string name() const override { return "cpu (" + matmul_isa_label(best_isa()) + ")"; }
  Isa isa() const override { return best_isa(); }
  bool host_memory() const override { return true; }

  void* alloc(size_t bytes) override {
    void* p = std::aligned_alloc(256, std::max<size_t>(256, (bytes + 255) / 256 * 256));
    MX_CHECK(p, "cpu backend: out of memory allocating {} bytes", bytes);
    return p;
  }
  void free(void* p) override { std::free(p); }
  void upload(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void download(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void copy(void* dst, const void* src, size_t n) override { std::memmove(dst, src, n); }
  void synchronize() override {}

  // The registry lookup (warnings, --strict-kernels) happens in the kernels.
  void matmul(float* y, const float* x, const DevWeight& w, int64_t T) override {
    mx::matmul(y, x, view(w), T, pool_, act(w));
  }
  void matmul_many(float* const* ys, const float* x, const DevWeight* const* ws, int n, int64_t T) override {
    constexpr int kMax = kMatmulManyMax;
    bool together = n <= kMax;
    for (int i = 0; i < n && together; ++i) together = act(*ws[i]) == Bf16Act::Auto;
    if (!together) return Backend::matmul_many(ys, x, ws, n, T);
    Tensor t[kMax];
    const Tensor* tp[kMax];
    for (int i = 0; i < n; ++i) t[i] = view(*ws[i]), tp[i] = &t[i];
    mx::matmul_many(ys, x, tp, n, T, pool_);
  }
  void matmul_with_config(float* y, const float* x, const DevWeight& w, int64_t T,
                          const KernelConfig& cfg) override {
    mx::matmul_with_config(best_isa(), cfg, y, x, view(w), T, pool_, act(w));
  }
  void rmsnorm_strided(float* y, const float* x, const float* w, int64_t rows, int dim, int64_t stride,
                       float eps) override {
    const Tensor wt(DType::F32, {dim}, const_cast<float*>(w));
    // Rows are independent: a prefill's rows over the pool.
    pool_.parallel_for(rows, [&](int64_t b, int64_t e) {
      if (stride == dim) return mx::rmsnorm(y + b * dim, x + b * dim, wt, e - b, dim, eps);
      for (int64_t r = b; r < e; ++r) mx::rmsnorm(y + r * stride, x + r * stride, wt, 1, dim, eps);
    }, std::max<int64_t>(1, kElementGrain / std::max(dim, 1)));
  }
  void copy_rows(float* dst, int64_t ds, const float* src, int64_t ss, int64_t rows, int64_t width) override {
    for (int64_t r = 0; r < rows; ++r) std::memmove(dst + r * ds, src + r * ss, width * sizeof(float));
  }
  void head_matmul(float* y, int64_t ys, int64_t yhs, const float* x, int64_t xs, int64_t xhs,
                   const std::vector<DevWeight>& w, int64_t T) override {
    const int nH = int(w.size()), nw = pool_.size();
    int64_t M = 1;
    for (const DevWeight& h : w) M = std::max({M, h.in, h.out});
    scratch_.reset();
    scratch_.reserve(size_t(nw) * T * M * 2 * 4 + 256);
    float* gather_all = scratch_.alloc(size_t(nw) * T * M * 2);
    // Heads in parallel, each matmul on the worker that claimed its head (nested pool
    // loops run inline; a single head runs on the caller, its matmul over the pool).
    pool_.claim_each(nH, [&](int64_t h, int wk) {
      float* xin = gather_all + size_t(wk) * T * M * 2;
      float* yout = xin + size_t(T) * M;
      const int64_t in = w[h].in, out = w[h].out;
      for (int64_t t = 0; t < T; ++t) std::memcpy(xin + t * in, x + t * xs + h * xhs, in * sizeof(float));
      mx::matmul(yout, xin, view(w[h]), T, pool_);
      for (int64_t t = 0; t < T; ++t) std::memcpy(y + t * ys + h * yhs, yout + t * out, out * sizeof(float));
    });
    scratch_.reset();
  }
  void add_bias(float* x, const float* b, int64_t rows, int dim) override {
    mx::add_bias(x, Tensor(DType::F32, {dim}, const_cast<float*>(b)), rows, dim);
  }
  // Element-wise: a prefill's worth over the pool, a decode step's on the
  // calling thread (kElementGrain).
  void silu_mul(float* y, const float* g, const float* u, int64_t n) override {
    elementwise(n, [&](int64_t b, int64_t e) { mx::silu_mul(y + b, g + b, u + b, e - b); });
  }
  void add(float* x, const float* y, int64_t n) override {
    elementwise(n, [&](int64_t b, int64_t e) { add_inplace(x + b, y + b, e - b); });
  }
  void embed(float* x, const DevWeight& table, const int32_t* ids, int64_t T) override {
    MX_CHECK(table.dtype == DType::F32 || table.dtype == DType::BF16, "embed: {} table", dtype_name(table.dtype));
    const int64_t D = table.in;
    for (int64_t t = 0; t < T; ++t) {
      if (ids[t] == -1) {  // vocab parallel: another rank's row
        std::fill(x + t * D, x + (t + 1) * D, 0.0f);
        continue;
      }
      MX_CHECK(ids[t] >= 0 && ids[t] < table.out, "embed: token id {} outside [0, {})", ids[t], table.out);
      if (table.dtype == DType::F32) {
        std::memcpy(x + t * D, static_cast<const float*>(table.data) + int64_t(ids[t]) * D, D * sizeof(float));
      } else {
        for (int64_t i = 0; i < D; ++i) x[t * D + i] = load_as_f32(table.data, table.dtype, int64_t(ids[t]) * D + i);
      }
    }
  }
  void rope(float* x, const int32_t* pos, int64_t T, int n_heads, int token_stride, int head_stride,
            const RopeArgs& r) override {
    pool_.parallel_for(T, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t)
        rope_rotate(x + t * token_stride, n_heads, head_stride, pos[t], r.rotary_dim, r.interleaved, r.mscale,
                     r.inv_freq);
    });
  }

  void kv_write(const PagedKV& kv, const float* k, int k_stride, const float* v, int v_stride,
                const int32_t* slots, int64_t T) override {
    auto put = [&](void* base, int width, const float* src, int64_t slot) {
      if (kv.dtype == DType::F32) return (void)std::memcpy(static_cast<float*>(base) + slot * width, src, width * 4);
      for (int i = 0; i < width; ++i) kv_store(base, kv.dtype, slot * width + i, src[i]);
    };
    for (int64_t t = 0; t < T; ++t) {
      put(kv.k, kv.k_width, k + t * k_stride, slots[t]);
      if (kv.v_width) put(kv.v, kv.v_width, v + t * v_stride, slots[t]);
    }
  }
  void paged_attention(float* out, const float* q, int q_stride, const PagedKV& kv, const AttnArgs& a,
                       const int32_t* block_tables, int max_blocks, const int32_t* seq, const int32_t* pos,
                       int64_t T) override {
    cpu_paged_attention(best_isa(), attention_products(best_isa(), kv.dtype), out, q, q_stride, kv, a, block_tables,
                        max_blocks, seq, pos, T, pool_, attn_);
  }
  void prefill_attention(float* out, const float* q, int q_stride, const PagedKV& kv, const AttnArgs& a,
                         const int32_t* block_table, int start_pos, int64_t n_q) override {
    prefill_seq_.assign(size_t(n_q), 0);
    prefill_pos_.resize(size_t(n_q));
    for (int64_t t = 0; t < n_q; ++t) prefill_pos_[t] = start_pos + int32_t(t);
    cpu_paged_attention(best_isa(), attention_products(best_isa(), kv.dtype), out, q, q_stride, kv, a, block_table, 0,
                        prefill_seq_.data(), prefill_pos_.data(), n_q, pool_, attn_);
  }

  void moe_route(int32_t* ids, float* w, const float* logits, int64_t T, const RouteArgs& r) override {
    MX_CHECK(r.n_experts > 0 && r.n_experts <= kMaxRouteExperts && r.k > 0 && r.k <= r.n_experts,
             "moe_route: {} of {} experts", r.k, r.n_experts);
    pool_.parallel_for(T, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t)
        route_token(logits + t * r.n_experts, r.n_experts, r.k, r.sigmoid, r.bias, r.n_group, r.topk_group,
                    r.norm_topk, r.scaling, ids + t * r.k, w + t * r.k);
    });
  }
  void moe_ffn(float* out, const float* x, const int32_t* ids, const float* weights, int64_t T, int k,
               const ExpertWeights& w) override {
    const int64_t D = model_dim(w);
    // The pairs' slots live past run_pairs' own scratch, in a buffer of their own.
    slots_.resize(size_t(T) * k * D);
    in_row_.resize(size_t(T) * k);
    for (int64_t i = 0; i < T * k; ++i) in_row_[i] = int32_t(i / k);
    run_pairs(slots_.data(), x, in_row_.data(), ids, T * k, w, x, out, w.has_shared() ? T : 0);
    if (!w.has_shared()) std::memset(out, 0, size_t(T) * D * sizeof(float));
    pool_.parallel_for(T, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t)
        for (int i = 0; i < k; ++i)  // slots are in ascending expert order (moe_route)
          axpy_f32(out + t * D, weights[t * k + i], slots_.data() + (size_t(t) * k + i) * D, D);
    });
  }
  void moe_pairs(float* slots, const float* x, const int32_t* in_row, const int32_t* expert, int64_t n_pairs,
                 const ExpertWeights& w, const float* xs, float* outs, int64_t ts) override {
    run_pairs(slots, x, in_row, expert, n_pairs, w, xs, outs, w.has_shared() ? ts : 0);
  }

  void fill_uniform_block(void* dst, DType dtype, size_t rows, size_t cols, size_t stride, uint64_t first, float lo,
                          float hi, uint64_t seed) override {
    const int code = fill_code(dtype);
    MX_CHECK(code >= 0, "fill_uniform: {} is not a dtype it makes", dtype_name(dtype));
    if (!rows || !cols) return;
    pool_.parallel_for(int64_t(rows * cols), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        fill_one(dst, code, uint64_t(i), fill_source_index(uint64_t(i), cols, stride, first), lo, hi, seed);
    });
  }

  void argmax(int32_t* ids, const float* logits, int64_t rows, int vocab) override {
    for (int64_t r = 0; r < rows; ++r) {
      const float* l = logits + r * vocab;
      ids[r] = int32_t(std::max_element(l, l + vocab) - l);  // first of equal maxima
    }
  }
  void sample(int32_t* ids, const float* logits, int64_t rows, int vocab, float temperature,
              uint64_t seed) override {
    MX_CHECK(temperature > 0, "sample: temperature {} must be > 0", temperature);
    for (int64_t r = 0; r < rows; ++r) {
      float best = -std::numeric_limits<float>::infinity();
      int32_t id = 0;
      for (int i = 0; i < vocab; ++i) {
        const float key = gumbel_key(logits[r * vocab + i], 1.0f / temperature, seed, r, i);
        if (key > best) best = key, id = i;
      }
      ids[r] = id;
    }
  }

 private:
  // Elements below which a parallel loop's hand-off costs more than it saves
  // (a decode step's SwiGLU of a few thousand elements stays on one thread).
  static constexpr int64_t kElementGrain = 16384;
  template <class F>
  void elementwise(int64_t n, F&& f) {
    pool_.parallel_for(n, f, kElementGrain);  // ThreadPool::run: n <= grain runs inline
  }

  static int64_t model_dim(const ExpertWeights& w) {
    for (const DevWeight& d : w.down)
      if (d.data) return d.out;
    return w.shared_down.out;
  }

  // down(silu(gate x) * up x) for `rows` rows on the calling thread's share of the pool.
  void swiglu(const DevWeight& gate, const DevWeight& up, const DevWeight& down, const float* x, float* out,
              int64_t rows, float* gu) {
    const int64_t H = gate.out;
    float* g = gu;
    float* u = gu + rows * H;
    const Tensor gt = view(gate), ut = view(up);
    float* const ys[] = {g, u};
    const Tensor* const ws[] = {&gt, &ut};
    mx::matmul_many(ys, x, ws, 2, rows, pool_);  // x rounded or quantized once
    mx::silu_mul(g, g, u, rows * H);
    mx::matmul(out, g, view(down), rows, pool_);
  }

  // Expert outputs for n_pairs (input row, expert) pairs, and the shared expert
  // over xs [ts rows] into outs, in one parallel schedule: the shared expert is
  // one more work item whose router always picks it. Items (every active expert
  // with its rows) are claimed by the workers as they free up, longest first
  // (ThreadPool::claim_each: an expert's cost is not its rows alone, and a core
  // may run slower than the other); each runs single-threaded on the worker that
  // claimed it (a single item: on the caller, its matmuls over the pool), so experts
  // execute in parallel and each result is independent of the split.
  void run_pairs(float* slots, const float* xin, const int32_t* in_row, const int32_t* pe, int64_t n_pairs,
                 const ExpertWeights& w, const float* xs, float* outs, int64_t ts) {
    const int E = w.n_experts();
    const int64_t H = model_dim(w);
    const int nw = pool_.size();
    int64_t max_hidden = w.has_shared() ? w.shared_gate.out : 0;
    for (const DevWeight& g : w.gate) max_hidden = std::max(max_hidden, g.out);
    // Counting sort of the pairs by expert.
    offs_.assign(E + 1, 0);
    order_.resize(std::max<int64_t>(n_pairs, 1));
    for (int64_t i = 0; i < n_pairs; ++i) {
      MX_CHECK(pe[i] >= 0 && pe[i] < E, "MoE: expert id {} outside [0, {})", pe[i], E);
      ++offs_[pe[i] + 1];
    }
    for (int e = 0; e < E; ++e) offs_[e + 1] += offs_[e];
    {
      std::vector<int32_t> fill(offs_.begin(), offs_.end() - 1);
      for (int64_t i = 0; i < n_pairs; ++i) order_[fill[pe[i]]++] = int32_t(i);
    }
    items_.clear();
    for (int e = 0; e < E; ++e)
      if (offs_[e + 1] > offs_[e]) {  // never touch an unselected expert
        MX_CHECK(w.gate[e].data, "MoE: expert {} routed to a rank that does not hold it", e);
        items_.push_back(e);
      }
    if (w.has_shared() && ts > 0) items_.push_back(E);
    auto rows_of = [&](int e) -> int64_t { return e == E ? ts : offs_[e + 1] - offs_[e]; };
    int64_t max_rows = ts;
    for (int e = 0; e < E; ++e) max_rows = std::max(max_rows, rows_of(e));
    std::stable_sort(items_.begin(), items_.end(), [&](int a, int b) { return rows_of(a) > rows_of(b); });
    const size_t R = size_t(std::max<int64_t>(max_rows, 1));
    scratch_.reset();
    scratch_.reserve(size_t(nw) * (2 * R * H + 2 * R * max_hidden) * 4 + 4 * 256);
    float* wx = scratch_.alloc(size_t(nw) * R * H);
    float* wy = scratch_.alloc(size_t(nw) * R * H);
    float* wgu = scratch_.alloc(size_t(nw) * 2 * R * std::max<int64_t>(max_hidden, 1));
    pool_.claim_each(int64_t(items_.size()), [&](int64_t i, int wk) {
      float* xe = wx + size_t(wk) * R * H;
      float* ye = wy + size_t(wk) * R * H;
      float* gu = wgu + size_t(wk) * 2 * R * max_hidden;
      const int e = items_[size_t(i)];
      if (e == E) return swiglu(w.shared_gate, w.shared_up, w.shared_down, xs, outs, ts, gu);
      const int64_t n = rows_of(e);
      for (int64_t r = 0; r < n; ++r)
        std::memcpy(xe + r * H, xin + size_t(in_row[order_[offs_[e] + r]]) * H, H * sizeof(float));
      swiglu(w.gate[e], w.up[e], w.down[e], xe, ye, n, gu);
      for (int64_t r = 0; r < n; ++r)
        std::memcpy(slots + size_t(order_[offs_[e] + r]) * H, ye + r * H, H * sizeof(float));
    });
    scratch_.reset();
  }

  ThreadPool& pool_;
  Arena scratch_;
  AttnScratch attn_;
  std::vector<float> slots_;
  std::vector<int32_t> in_row_, offs_, order_, prefill_seq_, prefill_pos_;
  std::vector<int> items_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(ThreadPool* pool) {
  return std::make_unique<CpuBackend>(pool ? *pool : global_pool());
}

}  // namespace mx
