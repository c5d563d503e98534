#include "models/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
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
  size_t n = T * E * 4 + 2 * T * k * 4 + (E + 1) * 4 + T * k * 4;  // logits, idx+w, offsets, order
  const size_t nw = global_pool().size();
  n += 2 * size_t(E + 1) * 4 + nw * 8;                             // work items, loads
  const size_t hid = std::max(expert_hidden_, shared_ ? shared_->hidden() : 0);
  n += nw * (2 * size_t(T) * dim_ + 2 * size_t(T) * hid) * 4;         // per-worker gather/out/gate-up
  n += size_t(T) * k * dim_ * 4;                                    // per-slot expert outputs
  if (plan_.ep_on())  // send/recv/result rows, pair tables, owned and gathered outputs
    n += 3 * size_t(T) * k * dim_ * 4 + 4 * size_t(T) * k * 4 + 3 * (size_t(T) + plan_.size) * dim_ * 4 +
         8 * size_t(plan_.size) * 8;
  return n + 32 * 64;
}

void MoeBlock::route(const float* logits, int32_t* idx, float* w) const {
  route_token(logits, m_.n_routed_experts, m_.num_experts_per_tok, m_.sigmoid_router,
              bias_f32_.empty() ? nullptr : bias_f32_.data(), m_.n_group, m_.topk_group,
              m_.norm_topk_prob, m_.routed_scaling_factor, idx, w);
}

void MoeBlock::forward(ForwardCtx& ctx, const float* x, float* out) const {
  const int T = ctx.n_tokens, E = m_.n_routed_experts, k = m_.num_experts_per_tok;
  Arena& a = ctx.arena;
  const size_t mark = a.mark();
  float* logits = a.alloc(size_t(T) * E);
  matmul(logits, x, router_, T, ctx.pool);
  int32_t* idx = a.alloc<int32_t>(size_t(T) * k);
  float* w = a.alloc(size_t(T) * k);
  ctx.pool.parallel_for(T, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) route(logits + t * E, idx + t * k, w + t * k);
  });
  if (plan_.ep_on()) {
    forward_ep(ctx, x, idx, w, out);
  } else {
    int32_t* in_row = a.alloc<int32_t>(size_t(T) * k);
    for (int i = 0; i < T * k; ++i) in_row[i] = i / k;
    float* slots = a.alloc(size_t(T) * k * dim_);
    run_pairs(ctx, T * k, idx, x, in_row, slots, x, out, T);
    combine(ctx, T, w, slots, bool(shared_), out);
  }
  a.rewind(mark);
}

void MoeBlock::combine(ForwardCtx& ctx, int T, const float* w, const float* slots, bool have_base,
                       float* out) const {
  const int k = m_.num_experts_per_tok, H = dim_;
  if (!have_base) std::memset(out, 0, size_t(T) * H * sizeof(float));
  ctx.pool.parallel_for(T, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      for (int i = 0; i < k; ++i)  // slots are in ascending expert order (route())
        axpy_f32(out + t * H, w[t * k + i], slots + (size_t(t) * k + i) * H, H);
  });
}

void MoeBlock::run_pairs(ForwardCtx& ctx, int n_pairs, const int32_t* pe, const float* xin,
                         const int32_t* in_row, float* slots, const float* xs, float* outs, int ts) const {
  const int E = m_.n_routed_experts, H = dim_;
  Arena& a = ctx.arena;
  const size_t mark = a.mark();
  // Counting sort of the pairs by expert.
  int32_t* offs = a.alloc<int32_t>(E + 1);
  int32_t* order = a.alloc<int32_t>(std::max(n_pairs, 1));
  std::fill(offs, offs + E + 1, 0);
  for (int i = 0; i < n_pairs; ++i) ++offs[pe[i] + 1];
  for (int e = 0; e < E; ++e) offs[e + 1] += offs[e];
  {
    int32_t* fill = a.alloc<int32_t>(E);
    std::copy(offs, offs + E, fill);
    for (int i = 0; i < n_pairs; ++i) order[fill[pe[i]]++] = i;
  }

  // Work items: every active expert with its rows, plus the shared expert over
  // its rows, scheduled together (the shared expert is one more expert whose
  // router always picks it). Items are dealt to workers longest first; each
  // runs single-threaded on its worker (nested parallel_for runs inline), so
  // experts execute in parallel and each result is independent of the split.
  const int nw = ctx.pool.size();
  int32_t* item_expert = a.alloc<int32_t>(E + 1);
  int32_t* item_worker = a.alloc<int32_t>(E + 1);
  int n_items = 0;
  for (int e = 0; e < E; ++e)
    if (offs[e + 1] > offs[e]) {  // never touch an unselected expert
      MX_CHECK(experts_[e], "MoE: expert {} routed to a rank that does not hold it", e);
      item_expert[n_items++] = e;
    }
  if (shared_ && ts > 0) item_expert[n_items++] = E;
  auto rows_of = [&](int e) { return e == E ? ts : offs[e + 1] - offs[e]; };
  int max_rows = ts;
  for (int e = 0; e < E; ++e) max_rows = std::max(max_rows, rows_of(e));
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
  const int max_hidden = std::max(expert_hidden_, shared_ ? shared_->hidden() : 0);
  const size_t R = std::max(max_rows, 1);
  float* wx = a.alloc(size_t(nw) * R * H);
  float* wy = a.alloc(size_t(nw) * R * H);
  float* wgu = a.alloc(size_t(nw) * 2 * R * max_hidden);
  ctx.pool.parallel_for(nw, [&](int64_t wb, int64_t we) {
    for (int64_t w = wb; w < we; ++w) {
      float* xe = wx + size_t(w) * R * H;
      float* ye = wy + size_t(w) * R * H;
      float* gu = wgu + size_t(w) * 2 * R * max_hidden;
      for (int i = 0; i < n_items; ++i) {
        if (item_worker[i] != w) continue;
        const int e = item_expert[i];
        if (e == E) {
          shared_->forward_rows(ctx, xs, outs, ts, gu);
          continue;
        }
        const int n = rows_of(e);
        for (int r = 0; r < n; ++r)
          std::memcpy(xe + size_t(r) * H, xin + size_t(in_row[order[offs[e] + r]]) * H, H * sizeof(float));
        experts_[e]->forward_rows(ctx, xe, ye, n, gu);
        for (int r = 0; r < n; ++r)
          std::memcpy(slots + size_t(order[offs[e] + r]) * H, ye + size_t(r) * H, H * sizeof(float));
      }
    }
  });
  a.rewind(mark);
}

void MoeBlock::forward_ep(ForwardCtx& ctx, const float* x, const int32_t* idx, const float* w,
                          float* out) const {
  const int T = ctx.n_tokens, E = m_.n_routed_experts, k = m_.num_experts_per_tok, H = dim_;
  const int P = plan_.size, me = plan_.rank;
  Comm& comm = *plan_.comm;
  Arena& a = ctx.arena;
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
  run_pairs(ctx, n_recv, recv_expert, recvx, recv_row, res, x + size_t(t0) * H, own, tn);
  float* back = a.alloc(size_t(std::max(n_send, 1)) * H);
  comm.alltoallv(res, rb, ro, back, sb, so);  // combine: results return to their tokens' owners
  float* slots = a.alloc(size_t(std::max(n_send, 1)) * H);
  for (int n = 0; n < n_send; ++n) std::memcpy(slots + size_t(send_pair[n]) * H, back + size_t(n) * H, H * 4);
  combine(ctx, tn, w + size_t(t0) * k, slots, bool(shared_), own);
  // Every rank needs every token's output (attention is replicated or TP next).
  float* all = a.alloc(size_t(P) * chunk * H);
  comm.allgather(own, size_t(chunk) * H * 4, all);
  for (int r = 0; r < P; ++r)
    std::memcpy(out + size_t(tok_lo(r)) * H, all + size_t(r) * chunk * H, size_t(tok_lo(r + 1) - tok_lo(r)) * H * 4);
}

}  // namespace mx
