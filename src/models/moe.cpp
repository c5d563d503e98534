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
  n += 2 * size_t(T) * dim_ * 4 + T * k * dim_ * 4;                // gathered x, expert out, slot outs
  size_t inner = experts_[0]->scratch_bytes(T);
  if (shared_) inner = std::max(inner, shared_->scratch_bytes(T));
  return n + inner + 16 * 64;
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

  float* xe = a.alloc(size_t(T) * H);
  float* ye = a.alloc(size_t(T) * H);
  float* slots = a.alloc(size_t(T) * k * H);
  for (int e = 0; e < E; ++e) {
    const int n = offs[e + 1] - offs[e];
    if (n == 0) continue;  // never touch an unselected expert's weights
    for (int r = 0; r < n; ++r)
      std::memcpy(xe + size_t(r) * H, x + size_t(order[offs[e] + r] / k) * H, H * sizeof(float));
    experts_[e]->forward_rows(ctx, xe, ye, n);
    for (int r = 0; r < n; ++r)
      std::memcpy(slots + size_t(order[offs[e] + r]) * H, ye + size_t(r) * H, H * sizeof(float));
  }

  if (shared_)
    shared_->forward_rows(ctx, x, out, T);
  else
    std::memset(out, 0, size_t(T) * H * sizeof(float));
  ctx.pool.parallel_for(T, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      for (int i = 0; i < k; ++i)  // slots are in ascending expert order (route())
        axpy_f32(out + t * H, w[t * k + i], slots + (size_t(t) * k + i) * H, H);
  });
  a.rewind(mark);
}

}  // namespace mx
