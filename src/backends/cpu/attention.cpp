// cpu_paged_attention: argument checks, the split of a batch into work items,
// their run over the pool, and the scalar ISA's plain loop (attention.h).
#include "backends/cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>

#include "core/error.h"
#include "backends/cpu/matmul.h"
#include "backends/cpu/ops.h"
#include "backends/registry.h"

namespace mx {
namespace {

using attn_detail::Call;
using attn_detail::Item;
using attn_detail::Kernel;

// The scalar ISA: each (token, head) on its own, dot products, one softmax over
// the whole context (sum in double), then the weighted sum of the values. The
// (token, head) items are dealt round-robin so the long-context tokens at the
// end of a prefill chunk spread over all workers.
void attend_scalar(const Call& c, const int32_t* tables, int max_blocks, const int32_t* seq, const int32_t* pos,
                   int64_t T, ThreadPool& pool, std::vector<float>& scratch) {
  const AttnArgs& a = c.a;
  const PagedKV& kv = c.kv;
  const int nw = pool.size(), bs = kv.block_size, qk = a.head_dim, vd = a.vd();
  const int group = a.n_heads / a.n_kv_heads;
  const void* vbase = a.values_in_k ? kv.k : kv.v;
  const int vw = a.values_in_k ? kv.k_width : kv.v_width;
  int max_ctx = 1;
  for (int64_t t = 0; t < T; ++t) max_ctx = std::max(max_ctx, pos[t] + 1);
  const bool wide = kv.dtype == DType::F32;
  const int64_t per = max_ctx + (wide ? 0 : qk + vd);
  scratch.resize(size_t(nw) * per);
  auto row = [&](const void* base, size_t at, int n, float* buf) -> const float* {
    if (wide) return static_cast<const float*>(base) + at;
    for (int i = 0; i < n; ++i) buf[i] = kv_load(base, kv.dtype, int64_t(at) + i);
    return buf;
  };
  const int64_t items = T * a.n_heads;
  pool.parallel_for(nw, [&](int64_t wb, int64_t we) {
    for (int64_t w = wb; w < we; ++w) {
      float* sc = scratch.data() + w * per;
      float* kbuf = wide ? nullptr : sc + max_ctx;
      float* vbuf = wide ? nullptr : kbuf + qk;
      for (int64_t it = w; it < items; it += nw) {
        const int64_t t = it / a.n_heads;
        const int h = int(it % a.n_heads), g = h / group;
        const int32_t* table = tables + int64_t(seq[t]) * max_blocks;
        const int n_ctx = pos[t] + 1;
        const float* qh = c.q + t * c.q_stride + int64_t(h) * qk;
        for (int j = 0; j < n_ctx; ++j) {
          const float* k = row(kv.k, (size_t(table[j / bs]) * bs + j % bs) * kv.k_width + size_t(g) * qk, qk, kbuf);
          sc[j] = dot_f32(qh, k, qk) * a.scale;
        }
        softmax_inplace(sc, n_ctx);
        float* o = c.out + (t * a.n_heads + h) * vd;
        std::memset(o, 0, vd * sizeof(float));
        for (int j = 0; j < n_ctx; ++j) {
          const float* v = row(vbase, (size_t(table[j / bs]) * bs + j % bs) * vw + size_t(g) * vd, vd, vbuf);
          axpy_f32(o, sc[j], v, vd);
        }
      }
    }
  });
}

const Kernel* tiled_kernel(Isa isa, AttnProducts products) {
  // Each built only where the CPU runs its ISA: the builders are compiled for it, and
  // the compiler may use its instructions in them too.
  static const Kernel k512 = isa_supported(Isa::Avx512) ? attn_detail::avx512_attention_kernel() : Kernel{};
  static const Kernel k512bf16 =
      attention_bf16_supported(Isa::Avx512) ? attn_detail::avx512_bf16_attention_kernel() : Kernel{};
  static const Kernel k512bf16fma =
      attention_bf16_supported(Isa::Avx512) ? attn_detail::avx512_bf16fma_attention_kernel() : Kernel{};
  static const Kernel k2 = isa_supported(Isa::Avx2) ? attn_detail::avx2_attention_kernel() : Kernel{};
  if (products == AttnProducts::Bf16) {
    MX_CHECK(attention_bf16_supported(isa),
             "attention: bf16 products need AVX-512 with AVX512-BF16 (asked on {}; this CPU: {})", isa_name(isa),
             cpu_features_string());
    return attention_bf16_fma() ? &k512bf16fma : &k512bf16;
  }
  if (isa == Isa::Avx512) return &k512;
  if (isa == Isa::Avx2) return &k2;
  return nullptr;
}

std::atomic<bool>& bf16_attention_setting() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("MXSERVE_BF16_ATTENTION");
    return !(e && std::string(e) == "0");
  }()};
  return on;
}

std::atomic<bool>& bf16_fma_setting() {
  static std::atomic<bool> on{[] {
    const KernelConfig* c = find_tuned_config("attention", DType::BF16, 0, 0, Isa::Avx512);
    return c && c->fma;
  }()};
  return on;
}

}  // namespace

bool attention_bf16_fma_supported() {
  static const bool ok = attention_bf16_supported(Isa::Avx512) && attn_detail::bf16_attention_fma_exact();
  return ok;
}

bool attention_bf16_fma() { return bf16_fma_setting().load() && attention_bf16_fma_supported(); }

bool set_attention_bf16_fma(bool on) { return bf16_fma_setting().exchange(on); }

bool attention_bf16_supported(Isa isa) {
  return isa == Isa::Avx512 && isa_supported(isa) && cpu_features().avx512bf16;
}

AttnProducts attention_products(Isa isa, DType cache) {
  const bool bf16 = cache != DType::F32 && attention_bf16_supported(isa) && matmul_bf16_activations(isa) &&
                    bf16_attention_setting();
  return bf16 ? AttnProducts::Bf16 : AttnProducts::F32;
}

bool set_attention_bf16(bool on) { return bf16_attention_setting().exchange(on); }

void cpu_paged_attention(Isa isa, AttnProducts products, float* out, const float* q, int q_stride, const PagedKV& kv,
                         const AttnArgs& a, const int32_t* block_tables, int max_blocks, const int32_t* seq,
                         const int32_t* pos, int64_t T, ThreadPool& pool, AttnScratch& s) {
  MX_CHECK(a.n_kv_heads > 0 && a.n_heads > 0 && a.n_heads % a.n_kv_heads == 0, "attention: {} heads over {} kv heads",
           a.n_heads, a.n_kv_heads);
  MX_CHECK(a.head_dim > 0 && a.vd() > 0, "attention: head_dim {}, v_dim {}", a.head_dim, a.vd());
  MX_CHECK(kv.block_size > 0, "attention: block size {}", kv.block_size);
  MX_CHECK(kv.k_width >= a.n_kv_heads * a.head_dim, "attention: key width {} below {} kv heads x {}", kv.k_width,
           a.n_kv_heads, a.head_dim);
  MX_CHECK(a.values_in_k ? a.vd() <= a.head_dim : kv.v_width >= a.n_kv_heads * a.vd(),
           "attention: value width {} too small for {} kv heads x {}", a.values_in_k ? a.head_dim : kv.v_width,
           a.n_kv_heads, a.vd());
  MX_CHECK(kv.dtype == DType::F32 || kv.dtype == DType::BF16 || kv.dtype == DType::F8_E4M3,
           "attention: {} KV cache", dtype_name(kv.dtype));
  for (int64_t t = 0; t < T; ++t)
    MX_CHECK(pos[t] >= 0 && seq[t] >= 0, "attention: token {} at position {} of sequence {}", t, pos[t], seq[t]);
  const Call c{out, q, q_stride, kv, a};
  const Kernel* k = tiled_kernel(isa, products);
  if (!k) return attend_scalar(c, block_tables, max_blocks, seq, pos, T, pool, s.floats);

  // Runs of consecutive positions of one sequence, then items of up to
  // item_rows rows of one run and KV head. A decode step with fewer items than
  // workers (one sequence over few KV heads; MLA has one) splits its rows
  // further, in multiples of half a vector, at the size whose deal ends soonest:
  // each item reads the whole cache, but in parallel, and a row's operations do
  // not depend on its item (attention.h). Halving the size instead overshot: 64
  // rows on 3 workers went as 4 items of 16, and one worker did two.
  const int group = a.n_heads / a.n_kv_heads;
  std::vector<Item>& items = s.items;
  auto make_items = [&](int item_rows) {
    items.clear();
    for (int64_t t = 0; t < T;) {
      int64_t e = t + 1;
      while (e < T && seq[e] == seq[t] && pos[e] == pos[e - 1] + 1) ++e;
      const int rows = int(e - t) * group;
      for (int g = 0; g < a.n_kv_heads; ++g)
        for (int r = 0; r < rows; r += item_rows) {
          Item it;
          it.t0 = t, it.n_q = int(e - t), it.pos0 = pos[t], it.g = g, it.r0 = r;
          it.r1 = std::min(rows, r + item_rows);
          it.table = block_tables + int64_t(seq[t]) * max_blocks;
          items.push_back(it);
        }
      t = e;
    }
  };
  // A model of claim_each's schedule (cost: rows x keys): longest first, each to the
  // worker free first; returns the largest load, by which the item size is chosen.
  // Who computes an item never changes how.
  auto cost = [&](const Item& it) { return int64_t(it.r1 - it.r0) * (it.pos0 + (it.r1 - 1) / group + 1); };
  std::vector<int>& order = s.order;
  std::vector<int64_t>& load = s.load;
  int nw = 1;
  auto deal = [&] {
    order.resize(items.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return cost(items[x]) > cost(items[y]); });
    nw = std::max(1, std::min<int>(pool.size(), int(items.size())));
    load.assign(size_t(nw), 0);
    for (int i : order) *std::min_element(load.begin(), load.end()) += cost(items[i]);
    return *std::max_element(load.begin(), load.end());
  };
  make_items(k->item_rows);
  if (int(items.size()) < pool.size()) {
    int max_run_rows = 0;
    for (const Item& it : items) max_run_rows = std::max(max_run_rows, it.r1);
    const int step = std::max(1, k->min_item_rows);
    // Sizes at or above the longest run's rows (rounded up) make the same items.
    int best = std::min(k->item_rows, (max_run_rows + step - 1) / step * step);
    int64_t best_end = deal();
    for (int r = best - step; r >= step; r -= step) {  // ties keep the larger items
      make_items(r);
      if (const int64_t end = deal(); end < best_end) best = r, best_end = end;
    }
    make_items(best);
  }
  deal();
  const int64_t per = k->scratch_floats(a);
  s.floats.resize(size_t(nw) * per);
  // The deal above sized the items; they run claimed longest first by whichever
  // worker is free (ThreadPool::claim_each), which also absorbs a slower core.
  pool.claim_each(int64_t(order.size()),
                  [&](int64_t i, int w) { k->run(c, items[size_t(order[size_t(i)])], s.floats.data() + w * per); });
}

}  // namespace mx
