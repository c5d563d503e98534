#include "devtools/planner/roofline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace mx::plan {

namespace {
constexpr double kActBytes = 2.0;    // bf16 activations on the wire
constexpr double kEmbedBytes = 2.0;  // embeddings and lm_head stay bf16

double link_bw(const Hardware& hw) { return hw.link_gbs * 1e9 * hw.link_eff; }
double mem_bw(const Hardware& hw) { return hw.mem_bw_gbs * 1e9 * hw.bw_eff; }

// Communication of `tokens` tokens through all layers of one replica, priced
// from the same per-collective byte counts mxserve's collectives send
// (comm_bytes, at kActBytes per activation): each collective moves its bytes
// summed over the P ranks, so a rank's link carries 1/P of them, plus the
// collective's latency terms (a ring allreduce 2 (P-1) steps, an all-to-all or
// allgather P-1).
double comm_s(const ModelShape& m, const Hardware& hw, const Layout& l, double tokens) {
  if (tokens <= 0) return 0;
  const CommBytes c = comm_bytes(m, l, kActBytes);
  const int dense_layers = m.layers - m.moe_layers;
  const double lat = hw.link_latency_us * 1e-6;
  double t = 0;
  if (l.tp > 1) {
    // Attention of every layer, FFNs that are tp-split (dense layers; MoE
    // layers when ep = 1), and the vocab-parallel embedding once.
    const int allreduces = m.layers + dense_layers + (l.ep == 1 ? m.moe_layers : 0);
    t += allreduces * (tokens * c.attn_allreduce / l.tp / link_bw(hw) + 2.0 * (l.tp - 1) * lat);
    t += tokens * c.embed_allreduce / l.tp / link_bw(hw) + 2.0 * (l.tp - 1) * lat;
  }
  if (l.ep > 1 && m.moe_layers > 0) {
    // Per MoE layer: dispatch and combine all-to-alls and the owners' output allgather.
    const int P = std::max(l.tp, l.ep);
    t += m.moe_layers * (tokens * (c.moe_all_to_all + c.moe_allgather) / P / link_bw(hw) + 3.0 * (P - 1) * lat);
  }
  return t;
}
}  // namespace

std::string Layout::name() const {
  std::string s = fmt::format("TP{}xDP{}", tp, dp);
  if (ep > 1) s += fmt::format("xEP{}", ep);
  return s;
}

double allreduce_s(double bytes, int n, const Hardware& hw) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) / n * bytes / link_bw(hw) + 2.0 * (n - 1) * hw.link_latency_us * 1e-6;
}

double all_to_all_s(double bytes, int n, const Hardware& hw) {
  if (n <= 1) return 0;
  return double(n - 1) / n * bytes / link_bw(hw) + double(n - 1) * hw.link_latency_us * 1e-6;
}

CommBytes comm_bytes(const ModelShape& m, const Layout& l, double act_bytes) {
  CommBytes c;
  const double row = double(m.hidden) * act_bytes;
  if (l.tp > 1) c.attn_allreduce = c.ffn_allreduce = c.embed_allreduce = 2.0 * (l.tp - 1) * row;
  // Expert parallel runs over the replica's ranks (mxserve: ep is 1 or the group size).
  const int P = std::max(l.tp, l.ep);
  if (l.ep > 1 && m.moe_layers > 0) {
    c.moe_all_to_all = 2.0 * m.top_k * double(P - 1) / P * row;
    c.moe_allgather = double(P - 1) * row;
  }
  return c;
}

double CommBytes::per_token(const ModelShape& m, const Layout& l) const {
  const int dense = m.layers - m.moe_layers;
  return embed_allreduce + m.layers * attn_allreduce + (dense + (l.ep == 1 ? m.moe_layers : 0)) * ffn_allreduce +
         m.moe_layers * (moe_all_to_all + moe_allgather);
}

double unique_experts(int experts, int top_k, double tokens) {
  if (experts <= 0 || tokens <= 0) return 0;
  return experts * (1.0 - std::pow(1.0 - double(top_k) / experts, tokens));
}

double gemm_efficiency(const Hardware& hw, double width) {
  if (hw.mm_half_width <= 0) return hw.mm_eff;
  return hw.mm_eff * width / (width + hw.mm_half_width);
}

Prediction predict(const ModelShape& m, const Hardware& hw, const Layout& l, const PlanWorkload& w,
                   const PlanOptions& o) {
  MX_CHECK(w.input >= 1 && w.output >= 1 && w.concurrency >= 1 && w.prefix_groups >= 1,
           "plan workload: input, output, concurrency and prefix groups must be >= 1");
  MX_CHECK(w.cached_fraction >= 0 && w.cached_fraction < 1, "plan workload: cached fraction must be in [0, 1)");
  Prediction p;
  p.layout = l;
  const double bpw = bytes_per_weight(o.dtype);
  const int N = l.gpus();
  const bool moe = m.moe_layers > 0;
  const int expert_split = l.ep > l.tp ? l.ep : l.tp;  // accelerators sharing one replica's expert bytes
  const double expert_total = double(m.moe_layers) * m.experts * m.expert_params;
  const double embed_bytes = (m.embed_params + (m.tied_embeddings ? 0 : m.lm_head_params)) * kEmbedBytes;

  // Memory per accelerator: dense parts and embeddings split tp ways, experts expert_split ways.
  const double weights = (m.attn_params + m.dense_ffn_params) * bpw / l.tp + embed_bytes / l.tp +
                         expert_total * bpw / expert_split;
  p.weights_gb_per_gpu = weights / 1e9;
  const double free_bytes = hw.mem_gb * 1e9 * (1.0 - o.mem_reserve) - weights;
  const double kv_per_token_gpu = m.kv_bytes_per_token / (m.kv_split_by_tp ? l.tp : 1);
  p.kv_tokens_per_replica = free_bytes > 0 ? free_bytes / kv_per_token_gpu : 0;

  const int active = std::min(l.dp, w.concurrency);  // replicas with work
  p.batch = double(w.concurrency) / active;
  const double b = p.batch;
  const double shared = w.cached_fraction * w.input;
  const double running_tokens = b * ((w.input - shared) + w.output) + shared;  // the prefix is shared by all
  if (free_bytes <= 0) {
    p.why_not = fmt::format("weights need {:.1f} GB per accelerator, {:.1f} GB usable", weights / 1e9,
                            hw.mem_gb * (1.0 - o.mem_reserve));
  } else if (p.kv_tokens_per_replica < running_tokens) {
    p.why_not = fmt::format("KV for {:.0f} tokens in flight per replica, room for {:.0f}", running_tokens,
                            p.kv_tokens_per_replica);
  } else {
    p.fits = true;
  }
  // Prefix cache: the replica's share of the prefix groups, in what KV is left after the running requests.
  const double groups_here = std::ceil(double(w.prefix_groups) / l.dp);
  const double cache_room = std::max(0.0, p.kv_tokens_per_replica - (running_tokens - shared));
  p.hit_rate = shared > 0 ? w.cached_fraction * std::min(1.0, cache_room / (groups_here * shared)) : 0;

  // Prefill of one request's uncached tokens on one replica.
  const double c0 = p.hit_rate * w.input, fresh = w.input - c0;
  const double dense_w = m.attn_params + m.dense_ffn_params;
  const double expert_active = double(m.moe_layers) * m.top_k * m.expert_params;
  const double eff_dense = gemm_efficiency(hw, double(m.hidden) / l.tp);
  const double eff_expert = gemm_efficiency(hw, l.ep > 1 ? m.expert_width : double(m.expert_width) / l.tp);
  const double peak = hw.tflops(o.dtype) * 1e12, peak_bf16 = hw.tflops_bf16 * 1e12;
  const double attn_pf = m.attn_flops_per_pos_prefill * (double(w.input) * w.input - c0 * c0) / 2.0;
  p.prefill_compute_s = (2.0 * fresh * dense_w / eff_dense + (moe ? 2.0 * fresh * expert_active / eff_expert : 0)) /
                            (l.tp * peak) +
                        attn_pf / (l.tp * peak_bf16 * eff_dense) +
                        2.0 * m.lm_head_params / (l.tp * peak_bf16 * eff_dense);  // logits of the last token
  const double chunks = std::ceil(fresh / o.prefill_chunk);
  const double expert_bytes_chunk =
      moe ? m.moe_layers * unique_experts(m.experts, m.top_k, std::min(fresh, double(o.prefill_chunk))) *
                m.expert_params * bpw / expert_split
          : 0;
  p.prefill_mem_s = chunks * (dense_w * bpw / l.tp + expert_bytes_chunk) / mem_bw(hw);
  p.prefill_comm_s = comm_s(m, hw, l, fresh);
  p.prefill_s = std::max(p.prefill_compute_s, p.prefill_mem_s) + p.prefill_comm_s;
  p.prefill_tok_s = fresh / p.prefill_s;
  p.prefill_tok_s_node = l.dp * w.input / p.prefill_s;

  // One decode step: b sequences per replica at the mean context of the decode phase.
  const double ctx = w.input + w.output / 2.0;
  const double tokens_in_ep_group = l.ep > l.tp ? b * (double(l.ep) / l.tp) : b;
  const double experts_read = moe ? m.moe_layers * unique_experts(m.experts, m.top_k, tokens_in_ep_group) : 0;
  const double step_bytes = dense_w * bpw / l.tp + m.lm_head_params * kEmbedBytes / l.tp +
                            experts_read * m.expert_params * bpw / expert_split + b * ctx * kv_per_token_gpu;
  p.decode_mem_s = step_bytes / mem_bw(hw);
  p.decode_compute_s = (b * 2.0 * (dense_w + expert_active) / eff_dense) / (l.tp * peak) +
                       b * (2.0 * m.lm_head_params + m.attn_flops_per_pos_decode * ctx) / (l.tp * peak_bf16 * eff_dense);
  p.decode_comm_s = comm_s(m, hw, l, b);
  p.decode_step_s = std::max(p.decode_mem_s, p.decode_compute_s) + p.decode_comm_s;
  p.per_user_tok_s = 1.0 / p.decode_step_s;
  p.decode_tok_s_node = active * b / p.decode_step_s;

  // A round on a replica: b prefills, then output steps at batch b.
  const double round = b * p.prefill_s + w.output * p.decode_step_s;
  p.output_tok_s_node = active * b * w.output / round;
  p.total_tok_s_node = active * b * double(w.input + w.output) / round;
  if (o.price_per_gpu_hour > 0) {
    const double per_s = o.price_per_gpu_hour * N / 3600.0;
    p.usd_per_mtok_total = per_s / p.total_tok_s_node * 1e6;
    p.usd_per_mtok_output = per_s / p.output_tok_s_node * 1e6;
  }
  return p;
}

std::vector<Layout> enumerate_layouts(int gpus, const ModelShape& m, int attention_heads) {
  MX_CHECK(gpus >= 1 && gpus <= 1024, "accelerators per node must be in [1, 1024]");
  std::vector<Layout> out;
  for (int tp = 1; tp <= gpus; ++tp) {
    if (gpus % tp || (attention_heads > 0 && attention_heads % tp)) continue;
    std::vector<int> eps = {1};
    if (m.moe_layers > 0) {
      for (int ep : {tp, gpus})
        if (ep > 1 && m.experts % ep == 0 && std::find(eps.begin(), eps.end(), ep) == eps.end()) eps.push_back(ep);
    }
    for (int ep : eps) out.push_back({tp, gpus / tp, ep});
  }
  return out;
}

std::vector<Prediction> rank_layouts(const ModelShape& m, const Hardware& hw, const PlanWorkload& w,
                                     const PlanOptions& o, int attention_heads) {
  std::vector<Prediction> out;
  for (const Layout& l : enumerate_layouts(hw.per_node, m, attention_heads)) out.push_back(predict(m, hw, l, w, o));
  std::stable_sort(out.begin(), out.end(), [](const Prediction& a, const Prediction& b) {
    if (a.fits != b.fits) return a.fits;
    return a.total_tok_s_node > b.total_tok_s_node;
  });
  return out;
}

}  // namespace mx::plan
