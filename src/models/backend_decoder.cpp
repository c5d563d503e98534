#include "models/backend_decoder.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "models/moe.h"

namespace mx {

struct BackendDecoder::Layer {
  const float *attn_norm = nullptr, *mlp_norm = nullptr;
  DevWeight wq, wk, wv, wo;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  RopeArgs rope;
  AttnArgs attn;
  float eps = 1e-6f;
  PagedKV kv;
  // Feed-forward: a dense SwiGLU MLP, or an MoE block (router, expert stacks,
  // optional shared expert in gate/up/down).
  bool moe = false, shared = false;
  DevWeight gate, up, down;
  DevWeight router, eg, eu, ed;
  RouteArgs route;
};

namespace {
constexpr int kBlock = 16;  // KV block size; the table is the identity (one sequence)
}

DevWeight BackendDecoder::upload(const Tensor& t) { return upload_stack({&t}); }

DevWeight BackendDecoder::upload_stack(const std::vector<const Tensor*>& ts) {
  const Tensor& t0 = *ts[0];
  MX_CHECK(t0.ndim == 2, "backend decoder: weight {} is not 2-D", t0.shape_str());
  MX_CHECK(t0.dtype == DType::F32 || t0.dtype == DType::BF16 || t0.dtype == DType::MXFP4 || t0.dtype == DType::F8_E4M3,
           "backend decoder: {} weights are not supported on a backend (F32, BF16, MXFP4, F8_E4M3)",
           dtype_name(t0.dtype));
  DevWeight w;
  w.dtype = t0.dtype, w.out = t0.shape[0], w.in = t0.shape[1], w.experts = int(ts.size());
  if (w.dtype == DType::F8_E4M3 && t0.scales) w.scale_cols = (w.in + 127) / 128;
  w.scales = t0.scales ? &w : nullptr;  // non-null marks "has scales" for scale_bytes()
  const size_t db = w.data_bytes(), sb = w.scale_bytes();
  owned_.emplace_back(b_, db * ts.size());
  w.data = owned_.back().get();
  void* scales = nullptr;
  if (sb) {
    owned_.emplace_back(b_, sb * ts.size());
    scales = owned_.back().get();
  }
  for (size_t e = 0; e < ts.size(); ++e) {
    const Tensor& t = *ts[e];
    MX_CHECK(t.dtype == t0.dtype && t.shape == t0.shape && bool(t.scales) == bool(t0.scales),
             "backend decoder: experts of one layer differ in dtype or shape");
    b_.upload(static_cast<char*>(w.data) + e * db, t.data, db);
    if (sb) b_.upload(static_cast<char*>(scales) + e * sb, t.scales, sb);
  }
  w.scales = scales;
  weight_bytes_ += (db + sb) * ts.size();
  return w;
}

const float* BackendDecoder::upload_f32(const Tensor& t) {
  if (t.empty()) return nullptr;
  std::vector<float> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = load_as_f32(t.data, t.dtype, i);
  return upload_floats(v);
}

const float* BackendDecoder::upload_floats(const std::vector<float>& v) {
  owned_.emplace_back(b_, std::max<size_t>(v.size(), 1) * 4);
  b_.upload(owned_.back().get(), v.data(), v.size() * 4);
  return owned_.back().get<float>();
}

float* BackendDecoder::scratch(size_t floats) {
  owned_.emplace_back(b_, std::max<size_t>(floats, 1) * 4);
  return owned_.back().get<float>();
}

BackendDecoder::BackendDecoder(const DecoderModel& m, Backend& b, int max_ctx, int max_tokens)
    : m_(m), b_(b), max_ctx_(max_ctx), max_tokens_(max_tokens) {
  const ModelConfig& c = m.config();
  MX_CHECK(!m.shard(), "backend decoder: a sharded (--tp/--ep) model cannot run on a backend yet");
  MX_CHECK(max_ctx > 0 && max_tokens > 0 && max_ctx <= (1 << 22), "backend decoder: max_ctx {} / max_tokens {}",
           max_ctx, max_tokens);
  const int D = c.hidden_size, T = max_tokens, n_blocks = (max_ctx + kBlock - 1) / kBlock;
  embed_ = upload(m.embed);
  head_ = upload(m.lm_head);
  final_norm_ = upload_f32(m.final_norm);
  int64_t qd = 0, kvd = 0, hidden = 1, E = 1, K = 1;
  layers_.resize(m.layers.size());
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const DecoderLayer& src = m.layers[l];
    Layer& L = layers_[l];
    const auto* gqa = dynamic_cast<const GqaAttention*>(src.attn.get());
    MX_CHECK(gqa, "backend decoder: layer {} attention is not GQA (MLA models such as DeepSeek-V3 run on the CPU only)", l);
    const GqaAttention::View a = gqa->view();
    L.attn_norm = upload_f32(src.attn_norm);
    L.mlp_norm = upload_f32(src.mlp_norm);
    L.wq = upload(a.wq), L.wk = upload(a.wk), L.wv = upload(a.wv), L.wo = upload(a.wo);
    L.bq = upload_f32(a.bq), L.bk = upload_f32(a.bk), L.bv = upload_f32(a.bv);
    L.q_norm = upload_f32(a.q_norm), L.k_norm = upload_f32(a.k_norm);
    L.rope = {a.rope.rotary_dim(), a.rope.style() == RopeStyle::Interleaved, a.rope.mscale(),
              upload_floats(a.rope.inv_freq())};
    L.attn = {a.n_heads, a.n_kv_heads, a.head_dim, a.scale};
    L.eps = a.norm_eps;
    qd = std::max<int64_t>(qd, int64_t(a.n_heads) * a.head_dim);
    const int w = a.n_kv_heads * a.head_dim;
    kvd = std::max<int64_t>(kvd, w);
    L.kv = {scratch(size_t(n_blocks) * kBlock * w), scratch(size_t(n_blocks) * kBlock * w), w, w, kBlock};
    if (const auto* mlp = dynamic_cast<const SwigluMlp*>(src.ffn.get())) {
      L.gate = upload(mlp->gate()), L.up = upload(mlp->up()), L.down = upload(mlp->down());
      hidden = std::max<int64_t>(hidden, mlp->hidden());
    } else if (const auto* moe = dynamic_cast<const MoeBlock*>(src.ffn.get())) {
      const MoeConfig& mc = moe->config();
      L.moe = true;
      L.router = upload(moe->router());
      std::vector<const Tensor*> g, u, d;
      for (int e = 0; e < mc.n_routed_experts; ++e) {
        const SwigluMlp* ex = moe->expert(e);
        MX_CHECK(ex, "backend decoder: expert {} of layer {} is not on this rank", e, l);
        g.push_back(&ex->gate()), u.push_back(&ex->up()), d.push_back(&ex->down());
        hidden = std::max<int64_t>(hidden, ex->hidden());
      }
      L.eg = upload_stack(g), L.eu = upload_stack(u), L.ed = upload_stack(d);
      const float* bias = moe->router_bias().empty() ? nullptr : upload_floats(moe->router_bias());
      L.route = {mc.n_routed_experts, mc.num_experts_per_tok, mc.sigmoid_router, mc.n_group, mc.topk_group,
                 mc.norm_topk_prob, mc.routed_scaling_factor, bias};
      if (const SwigluMlp* sh = moe->shared_expert()) {
        L.shared = true;
        L.gate = upload(sh->gate()), L.up = upload(sh->up()), L.down = upload(sh->down());
        hidden = std::max<int64_t>(hidden, sh->hidden());
      }
      E = std::max<int64_t>(E, mc.n_routed_experts), K = std::max<int64_t>(K, mc.num_experts_per_tok);
    } else {
      fail("backend decoder: layer {} has a feed-forward block the backend decoder does not know", l);
    }
  }
  x_ = scratch(size_t(T) * D), xn_ = scratch(size_t(T) * D), tmp_ = scratch(size_t(T) * D);
  tmp2_ = scratch(size_t(T) * D);
  q_ = scratch(size_t(T) * qd), attn_ = scratch(size_t(T) * qd);
  k_ = scratch(size_t(T) * kvd), v_ = scratch(size_t(T) * kvd);
  g_ = scratch(size_t(T) * hidden), u_ = scratch(size_t(T) * hidden);
  router_logits_ = scratch(size_t(T) * E), moe_w_ = scratch(size_t(T) * K);
  logits_ = scratch(size_t(c.vocab_size));
  auto ints = [&](size_t n) { return reinterpret_cast<int32_t*>(scratch(n)); };
  ids_ = ints(T), pos_ = ints(T), slots_ = ints(T), moe_ids_ = ints(size_t(T) * K), next_ = ints(1);
  zero_ = ints(1);
  table_ = ints(n_blocks);
  std::vector<int32_t> table(n_blocks);
  std::iota(table.begin(), table.end(), 0);
  b_.upload(table_, table.data(), table.size() * 4);
  const int32_t z = 0;
  b_.upload(zero_, &z, 4);
}

BackendDecoder::~BackendDecoder() = default;

void BackendDecoder::forward(const int32_t* tokens, int n, int start_pos) {
  const ModelConfig& c = m_.config();
  const int D = c.hidden_size;
  MX_CHECK(n > 0 && n <= max_tokens_, "backend decoder: {} tokens in one forward (1..{})", n, max_tokens_);
  MX_CHECK(start_pos >= 0 && start_pos + n <= max_ctx_, "backend decoder: positions {}..{} exceed the context {}",
           start_pos, start_pos + n, max_ctx_);
  std::vector<int32_t> pos(n);
  for (int i = 0; i < n; ++i) {
    MX_CHECK(tokens[i] >= 0 && tokens[i] < c.vocab_size, "token id {} is outside the vocabulary [0, {})", tokens[i], c.vocab_size);
    pos[i] = start_pos + i;
  }
  b_.upload(ids_, tokens, n * 4);
  b_.upload(pos_, pos.data(), n * 4);
  b_.upload(slots_, pos.data(), n * 4);  // identity block table: slot = position
  const int n_blocks = (max_ctx_ + kBlock - 1) / kBlock;
  b_.embed(x_, embed_, ids_, n);
  for (const Layer& L : layers_) {
    const AttnArgs& a = L.attn;
    const int qd = a.n_heads * a.head_dim, kvd = a.n_kv_heads * a.head_dim;
    b_.rmsnorm(xn_, x_, L.attn_norm, n, D, c.rms_norm_eps);
    b_.matmul(q_, xn_, L.wq, n);
    b_.matmul(k_, xn_, L.wk, n);
    b_.matmul(v_, xn_, L.wv, n);
    if (L.bq) {
      b_.add_bias(q_, L.bq, n, qd);
      b_.add_bias(k_, L.bk, n, kvd);
      b_.add_bias(v_, L.bv, n, kvd);
    }
    if (L.q_norm) {  // per-head RMSNorm before RoPE (Qwen3, GLM-4.5 use_qk_norm)
      b_.rmsnorm(q_, q_, L.q_norm, int64_t(n) * a.n_heads, a.head_dim, L.eps);
      b_.rmsnorm(k_, k_, L.k_norm, int64_t(n) * a.n_kv_heads, a.head_dim, L.eps);
    }
    b_.rope(q_, pos_, n, a.n_heads, qd, a.head_dim, L.rope);
    b_.rope(k_, pos_, n, a.n_kv_heads, kvd, a.head_dim, L.rope);
    b_.kv_write(L.kv, k_, kvd, v_, kvd, slots_, n);
    if (n == 1)
      b_.paged_attention(attn_, q_, qd, L.kv, a, table_, n_blocks, zero_, pos_, 1);
    else
      b_.prefill_attention(attn_, q_, qd, L.kv, a, table_, start_pos, n);
    b_.matmul(tmp_, attn_, L.wo, n);
    b_.add(x_, tmp_, int64_t(n) * D);
    b_.rmsnorm(xn_, x_, L.mlp_norm, n, D, c.rms_norm_eps);
    auto dense = [&](float* out) {
      const int64_t H = L.gate.out;
      b_.matmul(g_, xn_, L.gate, n);
      b_.matmul(u_, xn_, L.up, n);
      b_.silu_mul(g_, g_, u_, n * H);
      b_.matmul(out, g_, L.down, n);
    };
    if (!L.moe) {
      dense(tmp_);
    } else {
      b_.matmul(router_logits_, xn_, L.router, n);
      b_.moe_route(moe_ids_, moe_w_, router_logits_, n, L.route);
      b_.moe_ffn(tmp_, xn_, moe_ids_, moe_w_, n, L.route.k, L.eg, L.eu, L.ed);
      if (L.shared) {  // the shared expert, weight 1 (the CPU path sums in another order: equal to rounding)
        dense(tmp2_);
        b_.add(tmp_, tmp2_, int64_t(n) * D);
      }
    }
    b_.add(x_, tmp_, int64_t(n) * D);
  }
  b_.rmsnorm(xn_, x_ + int64_t(n - 1) * D, final_norm_, 1, D, c.rms_norm_eps);
  b_.matmul(logits_, xn_, head_, 1);
}

void BackendDecoder::logits(float* out) const {
  b_.download(out, logits_, size_t(m_.config().vocab_size) * 4);
}

int32_t BackendDecoder::next_token(float temperature, uint64_t seed) {
  const int V = m_.config().vocab_size;
  if (temperature > 0) b_.sample(next_, logits_, 1, V, temperature, seed);
  else b_.argmax(next_, logits_, 1, V);
  int32_t id = 0;
  b_.download(&id, next_, 4);
  return id;
}

}  // namespace mx
