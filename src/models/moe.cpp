#include "models/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"

namespace mx {

MoeBlock::MoeBlock(WeightBinder& wb, const std::string& p, const ModelConfig& c)
    : m_(c.moe), dim_(c.hidden_size) {
  MX_CHECK(m_.n_routed_experts <= kMaxExperts, "{} experts: at most {} are supported",
           m_.n_routed_experts, kMaxExperts);
  const int E = m_.n_routed_experts, H = c.hidden_size, I = m_.moe_intermediate_size;
  router_ = wb.linear(p + ".gate", p + ".router", E, H);
  if (m_.sigmoid_router)
    bias_ = wb.need(p + ".gate.e_score_correction_bias", p + ".router_bias", {E}, MX_FLOAT_WEIGHTS);
  experts_.reserve(E);
  for (int e = 0; e < E; ++e)
    experts_.push_back(std::make_unique<SwigluMlp>(wb, fmt::format("{}.experts.{}", p, e), H, I));
  if (m_.n_shared_experts > 0)
    shared_ = std::make_unique<SwigluMlp>(wb, p + ".shared_experts", H, I * m_.n_shared_experts);
}

size_t MoeBlock::bytes_per_token() const {
  size_t n = router_.storage_bytes() + bias_.nbytes() +
             size_t(m_.num_experts_per_tok) * experts_[0]->bytes_per_token();
  if (shared_) n += shared_->bytes_per_token();
  return n;
}

size_t MoeBlock::scratch_bytes(int T) const {
  const size_t E = m_.n_routed_experts, k = m_.num_experts_per_tok;
  size_t n = T * E * 4 + 2 * T * k * 4 + (E + 1) * 4 + T * k * 4;  // logits, idx+w, offsets, order
  const size_t nw = global_pool().size();
  n += 2 * size_t(E + 1) * 4 + nw * 8;                             // work items, loads
  const size_t hid = std::max(experts_[0]->hidden(), shared_ ? shared_->hidden() : 0);
  n += nw * (2 * size_t(T) * dim_ + 2 * size_t(T) * hid) * 4;         // per-worker gather/out/gate-up
  n += size_t(T) * k * dim_ * 4;                                    // per-slot expert outputs
  return n + 16 * 64;
}

void MoeBlock::route(const float* logits, int32_t* idx, float* w) const {
  const int E = m_.n_routed_experts, k = m_.num_experts_per_tok;
  // Fixed-size scratch on the stack (E <= kMaxExperts): routing runs per token
  // in the decode loop and must not allocate.
  float score[kMaxExperts], choice[kMaxExperts];
  int order[kMaxExperts];
  if (m_.sigmoid_router) {
    for (int e = 0; e < E; ++e) {
      score[e] = 1.0f / (1.0f + std::exp(-logits[e]));
      choice[e] = score[e] + load_as_f32(bias_.data, bias_.dtype, e);
    }
    if (m_.n_group > 1) {
      const int per = E / m_.n_group;
      float gscore[kMaxExperts];
      for (int g = 0; g < m_.n_group; ++g) {
        const float* c = choice + g * per;
        float a = -INFINITY, b = -INFINITY;  // two largest
        for (int i = 0; i < per; ++i) {
          if (c[i] > a) b = a, a = c[i];
          else if (c[i] > b) b = c[i];
        }
        gscore[g] = per >= 2 ? a + b : a;
      }
      int gorder[kMaxExperts];
      bool keep[kMaxExperts] = {};
      std::iota(gorder, gorder + m_.n_group, 0);
      std::stable_sort(gorder, gorder + m_.n_group, [&](int x, int y) { return gscore[x] > gscore[y]; });
      for (int i = 0; i < m_.topk_group; ++i) keep[gorder[i]] = true;
      for (int e = 0; e < E; ++e)
        if (!keep[e / per]) choice[e] = -INFINITY;
    }
  } else {
    const float mx = *std::max_element(logits, logits + E);
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += (score[e] = std::exp(logits[e] - mx));
    for (int e = 0; e < E; ++e) choice[e] = score[e] = float(score[e] / sum);
  }
  // Top-k by choice score; ties to the lower expert id (stable).
  std::iota(order, order + E, 0);
  std::partial_sort(order, order + k, order + E, [&](int a, int b) {
    return choice[a] != choice[b] ? choice[a] > choice[b] : a < b;
  });
  std::sort(order, order + k);  // ascending ids: fixed combine order
  double total = 0;
  for (int i = 0; i < k; ++i) total += score[order[i]];
  for (int i = 0; i < k; ++i) {
    idx[i] = order[i];
    double v = score[order[i]];
    if (m_.norm_topk_prob) v /= m_.sigmoid_router ? total + 1e-20 : total;
    w[i] = float(v * m_.routed_scaling_factor);
  }
}

void MoeBlock::forward(ForwardCtx& ctx, const float* x, float* out) const {
  const int T = ctx.n_tokens, E = m_.n_routed_experts, k = m_.num_experts_per_tok, H = dim_;
  Arena& a = ctx.arena;
  const size_t mark = a.mark();
  float* logits = a.alloc(size_t(T) * E);
  matmul(logits, x, router_, T, ctx.pool);
  int32_t* idx = a.alloc<int32_t>(size_t(T) * k);
  float* w = a.alloc(size_t(T) * k);
  ctx.pool.parallel_for(T, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) route(logits + t * E, idx + t * k, w + t * k);
  });

  // Counting sort of (token, slot) pairs by expert.
  int32_t* offs = a.alloc<int32_t>(E + 1);
  int32_t* order = a.alloc<int32_t>(size_t(T) * k);
  std::fill(offs, offs + E + 1, 0);
  for (int i = 0; i < T * k; ++i) ++offs[idx[i] + 1];
  for (int e = 0; e < E; ++e) offs[e + 1] += offs[e];
  {
    int32_t* fill = a.alloc<int32_t>(E);
    std::copy(offs, offs + E, fill);
    for (int i = 0; i < T * k; ++i) order[fill[idx[i]]++] = i;
  }

  // Work items: every active expert with its tokens, plus the shared expert over
  // all tokens, scheduled together (the shared expert is one more expert whose
  // router always picks it). Items are dealt to workers longest first; each
  // runs single-threaded on its worker (nested parallel_for runs inline), so
  // experts execute in parallel and each result is independent of the split.
  const int nw = ctx.pool.size();
  const int n_items_max = E + 1;
  int32_t* item_expert = a.alloc<int32_t>(n_items_max);
  int32_t* item_worker = a.alloc<int32_t>(n_items_max);
  int n_items = 0;
  for (int e = 0; e < E; ++e)
    if (offs[e + 1] > offs[e]) item_expert[n_items++] = e;  // never touch an unselected expert
  if (shared_) item_expert[n_items++] = E;
  auto rows_of = [&](int e) { return e == E ? T : offs[e + 1] - offs[e]; };
  std::stable_sort(item_expert, item_expert + n_items, [&](int x, int y) { return rows_of(x) > rows_of(y); });
  {
    int64_t* load = a.alloc<int64_t>(nw);
    std::fill(load, load + nw, 0);
    for (int i = 0; i < n_items; ++i) {
      int best = 0;
      for (int w = 1; w < nw; ++w)
        if (load[w] < load[best]) best = w;
      item_worker[i] = best;
      load[best] += rows_of(item_expert[i]);
    }
  }
  const int max_hidden = std::max(experts_[0]->hidden(), shared_ ? shared_->hidden() : 0);
  float* wx = a.alloc(size_t(nw) * T * H);
  float* wy = a.alloc(size_t(nw) * T * H);
  float* wgu = a.alloc(size_t(nw) * 2 * T * max_hidden);
  float* slots = a.alloc(size_t(T) * k * H);
  ctx.pool.parallel_for(nw, [&](int64_t wb, int64_t we) {
    for (int64_t w = wb; w < we; ++w) {
      float* xe = wx + size_t(w) * T * H;
      float* ye = wy + size_t(w) * T * H;
      float* gu = wgu + size_t(w) * 2 * T * max_hidden;
      for (int i = 0; i < n_items; ++i) {
        if (item_worker[i] != w) continue;
        const int e = item_expert[i];
        if (e == E) {
          shared_->forward_rows(ctx, x, out, T, gu);
          continue;
        }
        const int n = rows_of(e);
        for (int r = 0; r < n; ++r)
          std::memcpy(xe + size_t(r) * H, x + size_t(order[offs[e] + r] / k) * H, H * sizeof(float));
        experts_[e]->forward_rows(ctx, xe, ye, n, gu);
        for (int r = 0; r < n; ++r)
          std::memcpy(slots + size_t(order[offs[e] + r]) * H, ye + size_t(r) * H, H * sizeof(float));
      }
    }
  });
  if (!shared_) std::memset(out, 0, size_t(T) * H * sizeof(float));
  ctx.pool.parallel_for(T, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      for (int i = 0; i < k; ++i)  // slots are in ascending expert order (route())
        axpy_f32(out + t * H, w[t * k + i], slots + (size_t(t) * k + i) * H, H);
  });
  a.rewind(mark);
}

}  // namespace mx
