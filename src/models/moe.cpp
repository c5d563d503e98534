#include "models/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backends/cpu/ops.h"  // axpy_f32: the host combine of expert parallel
#include "comm/comm.h"

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
  e0_ = e0, el_ = el;
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
  // Expert parallel keeps its host rows in EpScratch; on a device backend the
  // arena holds the received rows and their results, local ids and weights,
  // and the shared expert's input, output and hidden activations.
  if (plan_.ep_on())
    n += 2 * size_t(T) * k * dim_ * 4 + 2 * size_t(T) * k * 4 + 2 * size_t(T) * dim_ * 4 +
         (shared_ ? shared_->scratch_bytes(T) : 0) + 8 * 256;
  return n + 32 * 256;
}

void MoeBlock::place(DeviceWeights& dw) {
  d_router_ = dw.matrix(router_);
  dw.count_read(bias_);  // read on the host at bind time (bias_f32_)
  // The top-k must not hinge on activations rounded to bf16 (transformers computes
  // the sigmoid routers in f32; a near tie would otherwise pick other experts).
  d_router_.f32_activations = true;
  d_route_ = {m_.n_routed_experts, m_.num_experts_per_tok, m_.sigmoid_router, m_.n_group, m_.topk_group,
              m_.norm_topk_prob, m_.routed_scaling_factor, bias_f32_.empty() ? nullptr : dw.floats(bias_f32_)};
  // A device backend takes a projection's experts as one contiguous stack, so
  // under EP it gets this rank's experts only (ids are shifted by e0_ in
  // run_pairs_on_device); host memory keeps all E slots, others' empty.
  const bool device_ep = plan_.ep_on() && !dw.backend().host_memory();
  std::vector<WeightSlice> g, u, d;
  for (const auto& ex : experts_) {
    if (device_ep && !ex) continue;
    g.push_back(ex ? WeightSlice(ex->gate()) : WeightSlice());
    u.push_back(ex ? WeightSlice(ex->up()) : WeightSlice());
    d.push_back(ex ? ex->down() : WeightSlice());
  }
  ExpertWeights& routed = device_ep ? d_local_ : d_experts_;
  routed.gate = dw.stack(g);
  routed.up = dw.stack(u);
  routed.down = dw.stack(d);
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

void MoeBlock::forward_ep(ForwardCtx& ctx, const float* x_in, const int32_t* idx_in, const float* w_in,
                          float* out) const {
  const int T = ctx.n_tokens, E = m_.n_routed_experts, k = m_.num_experts_per_tok, H = dim_;
  const int P = plan_.size, me = plan_.rank;
  Comm& comm = *plan_.comm;
  Backend& b = ctx.b;
  const bool host = b.host_memory();
  EpScratch& s = ep_;
  // Host views of the input and the routing: the arena's own memory on the CPU,
  // downloaded copies on a device backend (host-staged dispatch).
  const float* x = x_in;
  const int32_t* idx = idx_in;
  const float* w = w_in;
  if (!host) {
    s.x.resize(size_t(T) * H);
    s.idx.resize(size_t(T) * k);
    s.w.resize(size_t(T) * k);
    // On the comm stream (backends/backend.h comm_begin): the host waits for these copies alone.
    b.comm_begin();
    b.comm_download(s.x.data(), x_in, s.x.size() * 4);
    b.comm_download(s.idx.data(), idx_in, s.idx.size() * 4);
    b.comm_download(s.w.data(), w_in, s.w.size() * 4);
    b.comm_end();
    x = s.x.data(), idx = s.idx.data(), w = s.w.data();
  }
  // The ids pick ranks, experts and buffer offsets below: check every one first.
  for (size_t i = 0; i < size_t(T) * k; ++i)
    MX_CHECK(idx[i] >= 0 && idx[i] < E, "MoE: the router chose expert {} of {} (token {})", idx[i], E, i / k);
  const int per = E / P;
  auto expert_rank = [&](int e) { return e / per; };
  auto tok_lo = [&](int r) { return int(int64_t(T) * r / P); };  // rank r owns tokens [lo(r), lo(r+1))
  const int t0 = tok_lo(me), tn = tok_lo(me + 1) - t0;
  // Every rank routed every token (replicated activations and router), so each
  // knows what it sends and receives without exchanging counts. Rows travel in
  // (destination or source rank, token, slot) order.
  std::vector<size_t> cnt(4 * size_t(P), 0);
  size_t *sb = cnt.data(), *so = sb + P, *rb = sb + 2 * P, *ro = sb + 3 * P;
  int n_recv = 0;
  for (int r = 0; r < P; ++r)
    for (int t = tok_lo(r); t < tok_lo(r + 1); ++t)
      for (int i = 0; i < k; ++i) {
        const int d = expert_rank(idx[t * k + i]);
        if (r == me) sb[d] += size_t(H) * 4;
        if (d == me) rb[r] += size_t(H) * 4, ++n_recv;
      }
  for (int p = 1; p < P; ++p) so[p] = so[p - 1] + sb[p - 1], ro[p] = ro[p - 1] + rb[p - 1];
  const int n_send = tn * k;
  s.sendx.resize(size_t(std::max(n_send, 1)) * H);
  s.send_pair.resize(std::max(n_send, 1));  // (t - t0) * k + i of each sent row
  s.recv_expert.resize(std::max(n_recv, 1));
  s.recv_row.resize(std::max(n_recv, 1));
  {
    int n = 0;
    for (int d = 0; d < P; ++d)
      for (int t = t0; t < t0 + tn; ++t)
        for (int i = 0; i < k; ++i)
          if (expert_rank(idx[t * k + i]) == d) {
            std::memcpy(s.sendx.data() + size_t(n) * H, x + size_t(t) * H, H * 4);
            s.send_pair[n++] = (t - t0) * k + i;
          }
    n = 0;
    for (int r = 0; r < P; ++r)
      for (int t = tok_lo(r); t < tok_lo(r + 1); ++t)
        for (int i = 0; i < k; ++i)
          if (expert_rank(idx[t * k + i]) == me) s.recv_expert[n] = idx[t * k + i], s.recv_row[n] = n, ++n;
  }
  s.recvx.resize(size_t(std::max(n_recv, 1)) * H);
  comm.alltoallv(s.sendx.data(), sb, so, s.recvx.data(), rb, ro);  // dispatch
  // Experts of this rank over the rows it received; the shared expert over its own tokens.
  s.res.resize(size_t(std::max(n_recv, 1)) * H);
  const int chunk = (T + P - 1) / P;
  s.own.assign(size_t(chunk) * H, 0.0f);
  if (host)
    b.moe_pairs(s.res.data(), s.recvx.data(), s.recv_row.data(), s.recv_expert.data(), n_recv, d_experts_,
                x + size_t(t0) * H, s.own.data(), tn);
  else
    run_pairs_on_device(ctx, s.recvx.data(), s.recv_expert.data(), n_recv, s.res.data(), x_in, t0, tn,
                        s.own.data());
  s.back.resize(size_t(std::max(n_send, 1)) * H);
  comm.alltoallv(s.res.data(), rb, ro, s.back.data(), sb, so);  // combine: results return to their tokens' owners
  s.slots.resize(size_t(std::max(n_send, 1)) * H);
  for (int n = 0; n < n_send; ++n)
    std::memcpy(s.slots.data() + size_t(s.send_pair[n]) * H, s.back.data() + size_t(n) * H, H * 4);
  // own[t] (+)= sum_i w[t, i] * slots[t, i], in ascending expert order (route()).
  for (int t = 0; t < tn; ++t)
    for (int i = 0; i < k; ++i) {
      const float wt = w[size_t(t0 + t) * k + i];
      const float* sl = s.slots.data() + (size_t(t) * k + i) * H;
      axpy_f32(s.own.data() + size_t(t) * H, wt, sl, H);  // the CPU backend's combine, bit for bit
    }
  // Every rank needs every token's output (attention is replicated or TP next).
  s.all.resize(size_t(P) * chunk * H);
  comm.allgather(s.own.data(), size_t(chunk) * H * 4, s.all.data());
  // Close the gaps of ranks that own fewer than `chunk` tokens (moving left: safe in order).
  for (int r = 1; r < P; ++r)
    std::memmove(s.all.data() + size_t(tok_lo(r)) * H, s.all.data() + size_t(r) * chunk * H,
                 size_t(tok_lo(r + 1) - tok_lo(r)) * H * 4);
  if (host) {
    std::memcpy(out, s.all.data(), size_t(T) * H * 4);
  } else {  // the compute stream's next op waits for this upload (an event), not the host
    b.comm_begin();
    b.comm_upload(out, s.all.data(), size_t(T) * H * 4);
    b.comm_end();
  }
}

void MoeBlock::run_pairs_on_device(ForwardCtx& ctx, const float* recvx, const int32_t* recv_expert, int n_recv,
                                   float* res, const float* x, int t0, int tn, float* own) const {
  Backend& b = ctx.b;
  DevArena& a = ctx.arena;
  const int H = dim_;
  const size_t mark = a.mark();
  if (n_recv > 0) {
    // Rows came here because their expert is in [e0_, e0_ + el_) (forward_ep's
    // expert_rank): ids into the local stack, checked again since they index it.
    ep_.local_ids.resize(n_recv);
    for (int i = 0; i < n_recv; ++i) {
      const int e = recv_expert[i] - e0_;
      MX_CHECK(e >= 0 && e < el_, "MoE: expert {} reached rank {}, which holds experts [{}, {})", recv_expert[i],
               plan_.rank, e0_, e0_ + el_);
      ep_.local_ids[i] = e;
    }
    ep_.ones.assign(n_recv, 1.0f);  // weight 1: the combine's 0 + 1 * y is y exactly
    float* dx = a.alloc(size_t(n_recv) * H);
    float* dres = a.alloc(size_t(n_recv) * H);
    int32_t* dids = a.alloc<int32_t>(n_recv);
    float* dw = a.alloc(n_recv);
    b.upload(dx, recvx, size_t(n_recv) * H * 4);
    b.upload(dids, ep_.local_ids.data(), size_t(n_recv) * 4);
    b.upload(dw, ep_.ones.data(), size_t(n_recv) * 4);
    b.moe_ffn(dres, dx, dids, dw, n_recv, 1, d_local_);
    b.download(res, dres, size_t(n_recv) * H * 4);
  }
  if (shared_ && tn > 0) {
    // The shared expert is replicated: each owner runs it over its own tokens,
    // copied to an aligned buffer (the kernels' vector loads), as a dense MLP.
    float* xs = a.alloc(size_t(tn) * H);
    float* y = a.alloc(size_t(tn) * H);
    b.copy(xs, x + size_t(t0) * H, size_t(tn) * H * 4);
    ForwardCtx sub = ctx;
    sub.n_tokens = tn;
    shared_->forward(sub, xs, y);
    b.download(own, y, size_t(tn) * H * 4);
  }
  a.rewind(mark);
}

}  // namespace mx
