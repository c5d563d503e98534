#include "models/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/cpu/ops.h"  // axpy_f32: the host combine of expert parallel
#include "parallel/comm.h"

namespace mx {

MoeBlock::MoeBlock(WeightBinder& wb, const std::string& p, const ModelConfig& c)
    : m_(c.moe), dim_(c.hidden_size), plan_(wb.shard()) {
  MX_CHECK(m_.n_routed_experts <= kMaxExperts, "{} experts: at most {} are supported",
           m_.n_routed_experts, kMaxExperts);
  const int E = m_.n_routed_experts, H = c.hidden_size, I = m_.moe_intermediate_size;
  router_ = wb.linear(p + ".gate", p + ".router", E, H);
  if (m_.sigmoid_router)
    bias_ = wb.need(p + ".gate.e_score_correction_bias", p + ".router_bias", {E}, MX_FLOAT_WEIGHTS);
  if (!bias_.empty())
    for (int e = 0; e < E; ++e) bias_f32_.push_back(load_as_f32(bias_.data, bias_.dtype, e));
  // EP: whole experts [e0, e0 + E / P) here; TP: every expert's hidden split.
  const bool ep = plan_.ep_on(), tp = plan_.tp_on() && !ep;
  const int e0 = ep ? plan_.begin(E) : 0, el = ep ? plan_.part(E, "experts") : E;
  const int sr = tp ? plan_.rank : 0, ss = tp ? plan_.size : 1;
  experts_.reserve(E);
  for (int e = 0; e < E; ++e) {
    // Other ranks' experts are still bound (every tensor checked, none copied) and dropped.
    auto ex = std::make_unique<SwigluMlp>(wb, fmt::format("{}.experts.{}", p, e), H, I, sr, ss);
    expert_hidden_ = ex->hidden();
    expert_bytes_ = ex->bytes_per_token();
    experts_.push_back(e >= e0 && e < e0 + el ? std::move(ex) : nullptr);
  }
  if (m_.n_shared_experts > 0)  // replicated under EP, split under TP
    shared_ = std::make_unique<SwigluMlp>(wb, p + ".shared_experts", H, I * m_.n_shared_experts, sr, ss);
}

size_t MoeBlock::bytes_per_token() const {
  size_t n = router_.storage_bytes() + bias_.nbytes() + size_t(m_.num_experts_per_tok) * expert_bytes_;
  if (shared_) n += shared_->bytes_per_token();
  return n;
}

size_t MoeBlock::scratch_bytes(int T) const {
  const size_t E = m_.n_routed_experts, k = m_.num_experts_per_tok;
  size_t n = T * E * 4 + 2 * T * k * 4;  // router logits, ids + weights
  if (plan_.ep_on())  // send/recv/result rows, pair tables, owned and gathered outputs
    n += 3 * size_t(T) * k * dim_ * 4 + 4 * size_t(T) * k * 4 + 3 * (size_t(T) + plan_.size) * dim_ * 4 +
         8 * size_t(plan_.size) * 8 + size_t(T) * k * dim_ * 4;
  return n + 32 * 256;
}

void MoeBlock::place(DeviceWeights& dw) {
  d_router_ = dw.matrix(router_);
  // The top-k must not hinge on activations rounded to bf16 (transformers computes
  // the sigmoid routers in f32; a near tie would otherwise pick other experts).
  d_router_.f32_activations = true;
  d_route_ = {m_.n_routed_experts, m_.num_experts_per_tok, m_.sigmoid_router, m_.n_group, m_.topk_group,
              m_.norm_topk_prob, m_.routed_scaling_factor, bias_f32_.empty() ? nullptr : dw.floats(bias_f32_)};
  std::vector<const Tensor*> g, u, d;
  for (const auto& ex : experts_) {
    g.push_back(ex ? &ex->gate() : nullptr);
    u.push_back(ex ? &ex->up() : nullptr);
    d.push_back(ex ? &ex->down() : nullptr);
  }
  d_experts_.gate = dw.stack(g);
  d_experts_.up = dw.stack(u);
  d_experts_.down = dw.stack(d);
  if (shared_) {
    shared_->place(dw);
    d_experts_.shared_gate = shared_->d_gate();
    d_experts_.shared_up = shared_->d_up();
    d_experts_.shared_down = shared_->d_down();
  }
}

void MoeBlock::route(const float* logits, int32_t* idx, float* w) const {
  route_token(logits, m_.n_routed_experts, m_.num_experts_per_tok, m_.sigmoid_router,
              bias_f32_.empty() ? nullptr : bias_f32_.data(), m_.n_group, m_.topk_group,
              m_.norm_topk_prob, m_.routed_scaling_factor, idx, w);
}

void MoeBlock::forward(ForwardCtx& ctx, const float* x, float* out) const {
  const int T = ctx.n_tokens, E = m_.n_routed_experts, k = m_.num_experts_per_tok;
  DevArena& a = ctx.arena;
  const size_t mark = a.mark();
  float* logits = a.alloc(size_t(T) * E);
  ctx.b.matmul(logits, x, d_router_, T);
  int32_t* idx = a.alloc<int32_t>(size_t(T) * k);
  float* w = a.alloc(size_t(T) * k);
  ctx.b.moe_route(idx, w, logits, T, d_route_);
  if (plan_.ep_on()) forward_ep(ctx, x, idx, w, out);
  else ctx.b.moe_ffn(out, x, idx, w, T, k, d_experts_);
  a.rewind(mark);
}

void MoeBlock::forward_ep(ForwardCtx& ctx, const float* x, const int32_t* idx, const float* w,
                          float* out) const {
  const int T = ctx.n_tokens, E = m_.n_routed_experts, k = m_.num_experts_per_tok, H = dim_;
  const int P = plan_.size, me = plan_.rank;
  Comm& comm = *plan_.comm;
  DevArena& a = ctx.arena;  // host memory: expert parallel runs on host-memory backends (checked at load)
  const int per = E / P;
  auto expert_rank = [&](int e) { return e / per; };
  auto tok_lo = [&](int r) { return int(int64_t(T) * r / P); };  // rank r owns tokens [lo(r), lo(r+1))
  const int t0 = tok_lo(me), tn = tok_lo(me + 1) - t0;
  // Every rank routed every token (replicated activations and router), so each
  // knows what it sends and receives without exchanging counts. Rows travel in
  // (destination or source rank, token, slot) order.
  size_t* cnt = a.alloc<size_t>(8 * size_t(P));
  size_t *sb = cnt, *so = cnt + P, *rb = cnt + 2 * P, *ro = cnt + 3 * P;
  std::fill(cnt, cnt + 4 * P, 0);
  int n_recv = 0;
  for (int s = 0; s < P; ++s)
    for (int t = tok_lo(s); t < tok_lo(s + 1); ++t)
      for (int i = 0; i < k; ++i) {
        const int d = expert_rank(idx[t * k + i]);
        if (s == me) sb[d] += size_t(H) * 4;
        if (d == me) rb[s] += size_t(H) * 4, ++n_recv;
      }
  for (int p = 1; p < P; ++p) so[p] = so[p - 1] + sb[p - 1], ro[p] = ro[p - 1] + rb[p - 1];
  const int n_send = tn * k;
  float* sendx = a.alloc(size_t(std::max(n_send, 1)) * H);
  int32_t* send_pair = a.alloc<int32_t>(std::max(n_send, 1));  // (t - t0) * k + i of each sent row
  int32_t* recv_expert = a.alloc<int32_t>(std::max(n_recv, 1));
  int32_t* recv_row = a.alloc<int32_t>(std::max(n_recv, 1));
  {
    int n = 0;
    for (int d = 0; d < P; ++d)
      for (int t = t0; t < t0 + tn; ++t)
        for (int i = 0; i < k; ++i)
          if (expert_rank(idx[t * k + i]) == d) {
            std::memcpy(sendx + size_t(n) * H, x + size_t(t) * H, H * 4);
            send_pair[n++] = (t - t0) * k + i;
          }
    n = 0;
    for (int s = 0; s < P; ++s)
      for (int t = tok_lo(s); t < tok_lo(s + 1); ++t)
        for (int i = 0; i < k; ++i)
          if (expert_rank(idx[t * k + i]) == me) recv_expert[n] = idx[t * k + i], recv_row[n] = n, ++n;
  }
  float* recvx = a.alloc(size_t(std::max(n_recv, 1)) * H);
  comm.alltoallv(sendx, sb, so, recvx, rb, ro);  // dispatch
  // Experts of this rank over the rows it received; the shared expert over its own tokens.
  float* res = a.alloc(size_t(std::max(n_recv, 1)) * H);
  const int chunk = (T + P - 1) / P;
  float* own = a.alloc(size_t(chunk) * H);
  std::memset(own, 0, size_t(chunk) * H * 4);
  ctx.b.moe_pairs(res, recvx, recv_row, recv_expert, n_recv, d_experts_, x + size_t(t0) * H, own, tn);
  float* back = a.alloc(size_t(std::max(n_send, 1)) * H);
  comm.alltoallv(res, rb, ro, back, sb, so);  // combine: results return to their tokens' owners
  float* slots = a.alloc(size_t(std::max(n_send, 1)) * H);
  for (int n = 0; n < n_send; ++n) std::memcpy(slots + size_t(send_pair[n]) * H, back + size_t(n) * H, H * 4);
  // own[t] (+)= sum_i w[t, i] * slots[t, i], in ascending expert order (route()).
  for (int t = 0; t < tn; ++t)
    for (int i = 0; i < k; ++i) {
      const float wt = w[size_t(t0 + t) * k + i];
      const float* sl = slots + (size_t(t) * k + i) * H;
      axpy_f32(own + size_t(t) * H, wt, sl, H);  // the CPU backend's combine, bit for bit
    }
  // Every rank needs every token's output (attention is replicated or TP next).
  float* all = a.alloc(size_t(P) * chunk * H);
  comm.allgather(own, size_t(chunk) * H * 4, all);
  for (int r = 0; r < P; ++r)
    std::memcpy(out + size_t(tok_lo(r)) * H, all + size_t(r) * chunk * H, size_t(tok_lo(r + 1) - tok_lo(r)) * H * 4);
}

}  // namespace mx
