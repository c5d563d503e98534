// The CPU backend: Backend's ops on host memory, through the CPU kernels
// (kernels/cpu/matmul.h, ops.h) and the process-wide thread pool. It is the
// reference the GPU backend's results are compared with (tests/kernels/test_backend.cpp).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/route_impl.h"
#include "kernels/sample_impl.h"
#include "models/rope.h"

namespace mx {
namespace {

// Expert e of a stacked weight as a Tensor view.
Tensor expert_view(const DevWeight& w, int e) {
  Tensor t(w.dtype, {w.out, w.in}, static_cast<char*>(w.data) + size_t(e) * w.data_bytes());
  if (w.scales) t.scales = static_cast<const char*>(w.scales) + size_t(e) * w.scale_bytes();
  return t;
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return std::string("cpu (") + isa_name(best_isa()) + ")"; }
  Isa isa() const override { return best_isa(); }

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

  void matmul_with_config(float* y, const float* x, const DevWeight& w, int64_t T,
                          const KernelConfig& cfg) override {
    MX_CHECK(w.experts == 1, "matmul: a stack of {} experts is not one matrix", w.experts);
    mx::matmul_with_config(best_isa(), cfg, y, x, expert_view(w, 0), T, global_pool());
  }
  void rmsnorm(float* y, const float* x, const float* w, int64_t rows, int dim, float eps) override {
    mx::rmsnorm(y, x, Tensor(DType::F32, {dim}, const_cast<float*>(w)), rows, dim, eps);
  }
  void add_bias(float* x, const float* b, int64_t rows, int dim) override {
    mx::add_bias(x, Tensor(DType::F32, {dim}, const_cast<float*>(b)), rows, dim);
  }
  void silu_mul(float* y, const float* g, const float* u, int64_t n) override { mx::silu_mul(y, g, u, n); }
  void add(float* x, const float* y, int64_t n) override { add_inplace(x, y, n); }
  void embed(float* x, const DevWeight& table, const int32_t* ids, int64_t T) override {
    MX_CHECK(table.dtype == DType::F32 || table.dtype == DType::BF16, "embed: {} table", dtype_name(table.dtype));
    for (int64_t t = 0; t < T; ++t) {
      MX_CHECK(ids[t] >= 0 && ids[t] < table.out, "embed: token id {} outside [0, {})", ids[t], table.out);
      for (int64_t i = 0; i < table.in; ++i)
        x[t * table.in + i] = load_as_f32(table.data, table.dtype, int64_t(ids[t]) * table.in + i);
    }
  }
  void rope(float* x, const int32_t* pos, int64_t T, int n_heads, int token_stride, int head_stride,
            const RopeArgs& r) override {
    for (int64_t t = 0; t < T; ++t)
      Rope::rotate(x + t * token_stride, n_heads, head_stride, pos[t], r.rotary_dim, r.interleaved, r.mscale,
                   r.inv_freq);
  }

  void kv_write(const PagedKV& kv, const float* k, int k_stride, const float* v, int v_stride,
                const int32_t* slots, int64_t T) override {
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(kv.k + size_t(slots[t]) * kv.k_width, k + t * k_stride, kv.k_width * 4);
      if (kv.v_width) std::memcpy(kv.v + size_t(slots[t]) * kv.v_width, v + t * v_stride, kv.v_width * 4);
    }
  }
  void paged_attention(float* out, const float* q, int q_stride, const PagedKV& kv, const AttnArgs& a,
                       const int32_t* block_tables, int max_blocks, const int32_t* seq, const int32_t* pos,
                       int64_t T) override {
    global_pool().parallel_for(T * a.n_heads, [&](int64_t b, int64_t e) {
      std::vector<float> s;
      for (int64_t i = b; i < e; ++i) {
        const int64_t t = i / a.n_heads;
        attend(out + t * a.n_heads * a.head_dim, q + t * q_stride, int(i % a.n_heads), kv, a,
               block_tables + int64_t(seq[t]) * max_blocks, pos[t] + 1, s);
      }
    });
  }
  void prefill_attention(float* out, const float* q, int q_stride, const PagedKV& kv, const AttnArgs& a,
                         const int32_t* block_table, int start_pos, int64_t n_q) override {
    global_pool().parallel_for(n_q * a.n_heads, [&](int64_t b, int64_t e) {
      std::vector<float> s;
      for (int64_t i = b; i < e; ++i) {
        const int64_t t = i / a.n_heads;
        attend(out + t * a.n_heads * a.head_dim, q + t * q_stride, int(i % a.n_heads), kv, a, block_table,
               start_pos + int(t) + 1, s);
      }
    });
  }

  void moe_route(int32_t* ids, float* w, const float* logits, int64_t T, const RouteArgs& r) override {
    MX_CHECK(r.n_experts > 0 && r.n_experts <= kMaxRouteExperts && r.k > 0 && r.k <= r.n_experts,
             "moe_route: {} of {} experts", r.k, r.n_experts);
    for (int64_t t = 0; t < T; ++t)
      route_token(logits + t * r.n_experts, r.n_experts, r.k, r.sigmoid, r.bias, r.n_group, r.topk_group,
                  r.norm_topk, r.scaling, ids + t * r.k, w + t * r.k);
  }
  void moe_ffn(float* out, const float* x, const int32_t* ids, const float* weights, int64_t T, int k,
               const DevWeight& gate, const DevWeight& up, const DevWeight& down) override {
    const int E = gate.experts;
    const int64_t D = gate.in, H = gate.out;
    // Group the (token, slot) pairs by expert; each active expert runs one GEMM.
    std::vector<std::vector<int64_t>> pairs(E);
    for (int64_t p = 0; p < T * k; ++p) {
      MX_CHECK(ids[p] >= 0 && ids[p] < E, "moe_ffn: expert id {} outside [0, {})", ids[p], E);
      pairs[ids[p]].push_back(p);
    }
    std::vector<float> slots(size_t(T) * k * D), xin, g, u;
    for (int e = 0; e < E; ++e) {
      const int64_t n = int64_t(pairs[e].size());
      if (n == 0) continue;
      xin.resize(n * D), g.resize(n * H), u.resize(n * H);
      for (int64_t j = 0; j < n; ++j) std::memcpy(&xin[j * D], x + (pairs[e][j] / k) * D, D * 4);
      ThreadPool& pool = global_pool();
      mx::matmul(g.data(), xin.data(), expert_view(gate, e), n, pool);
      mx::matmul(u.data(), xin.data(), expert_view(up, e), n, pool);
      mx::silu_mul(g.data(), g.data(), u.data(), n * H);
      std::vector<float> y(n * D);
      mx::matmul(y.data(), g.data(), expert_view(down, e), n, pool);
      for (int64_t j = 0; j < n; ++j) std::memcpy(&slots[pairs[e][j] * D], &y[j * D], D * 4);
    }
    for (int64_t t = 0; t < T; ++t)  // slots are in ascending expert order (moe_route)
      for (int64_t i = 0; i < D; ++i) {
        float acc = 0;
        for (int j = 0; j < k; ++j) acc += weights[t * k + j] * slots[(t * k + j) * D + i];
        out[t * D + i] = acc;
      }
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
  // One query head over n_ctx positions of a sequence's paged cache.
  static void attend(float* out, const float* q, int h, const PagedKV& kv, const AttnArgs& a,
                     const int32_t* table, int n_ctx, std::vector<float>& s) {
    const int D = a.head_dim, g = h / (a.n_heads / a.n_kv_heads);
    s.resize(n_ctx);
    auto slot = [&](int p) { return size_t(table[p / kv.block_size]) * kv.block_size + p % kv.block_size; };
    for (int p = 0; p < n_ctx; ++p) s[p] = a.scale * dot_f32(q + h * D, kv.k + slot(p) * kv.k_width + g * D, D);
    softmax_inplace(s.data(), n_ctx);
    float* o = out + h * D;
    std::fill(o, o + D, 0.0f);
    for (int p = 0; p < n_ctx; ++p) axpy_f32(o, s[p], kv.v + slot(p) * kv.v_width + g * D, D);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace mx
