#pragma once
// The planner's roofline model: for a model, an accelerator and a TP x DP x EP
// layout of one node, predicts prefill and decode speed, throughput per node
// and $/Mtok for a workload. Every term is documented in docs/planner.md.
//
// Layout: dp replicas of tp accelerators each (tp * dp = accelerators per
// node). Attention and dense FFNs are split tp ways (Megatron: two all-reduces
// per layer). Routed experts are split tp ways too when ep = 1; with ep = tp
// each rank of a replica holds whole experts (an all-to-all replaces the FFN
// all-reduce); with ep = tp * dp the experts are spread over the whole node and
// the replicas' tokens meet in one all-to-all (DP attention + EP).
#include <string>
#include <vector>

#include "devtools/planner/hardware.h"
#include "devtools/planner/model_shape.h"

namespace mx::plan {

struct Layout {
  int tp = 1, dp = 1, ep = 1;
  int gpus() const { return tp * dp; }
  std::string name() const;  // "TP4xDP2", "TP4xDP2xEP4"
};

struct PlanWorkload {
  std::string name = "custom";
  int input = 1024, output = 128;  // tokens per request
  double cached_fraction = 0;      // of each input, served by the prefix cache when it fits
  int prefix_groups = 1;           // distinct shared prefixes; cache-aware routing gives each replica groups/dp
  int concurrency = 16;            // requests in flight on the node
};

struct PlanOptions {
  WeightDType dtype = WeightDType::BF16;  // of the layers' Linear weights (embeddings, lm_head stay bf16)
  double price_per_gpu_hour = 0;          // 0: no $ figures
  double mem_reserve = 0.1;               // fraction of memory kept for activations and the runtime
  int prefill_chunk = 8192;               // tokens per prefill forward (weights are read once per chunk)
};

struct Prediction {
  Layout layout;
  bool fits = false;
  std::string why_not;                 // when !fits
  double weights_gb_per_gpu = 0, kv_tokens_per_replica = 0;
  double hit_rate = 0;                 // effective prefix-cache hit rate
  // One request's prefill (its uncached tokens) on one replica.
  double prefill_s = 0, prefill_compute_s = 0, prefill_mem_s = 0, prefill_comm_s = 0;
  double prefill_tok_s = 0;            // uncached tokens / prefill_s (one replica, one request)
  double prefill_tok_s_node = 0;       // prompt tokens incl. cached, all replicas prefilling
  // One decode step of b = concurrency / active replicas sequences at the mean context.
  double batch = 0, decode_step_s = 0, decode_mem_s = 0, decode_compute_s = 0, decode_comm_s = 0;
  double per_user_tok_s = 0;           // 1 / decode_step_s
  double decode_tok_s_node = 0;        // output tokens/s of the node while decoding
  // The workload: each replica serves rounds of b requests (their prefills, then their decodes).
  double output_tok_s_node = 0, total_tok_s_node = 0;
  double usd_per_mtok_total = 0, usd_per_mtok_output = 0;  // 0 without a price
};

// Pieces of the model, exposed for the tests (hand-checked arithmetic).
double allreduce_s(double bytes, int n, const Hardware& hw);    // ring: 2(n-1)/n bytes over the link + 2(n-1) latencies
double all_to_all_s(double bytes, int n, const Hardware& hw);   // (n-1)/n of a rank's bytes leave it + (n-1) latencies
double unique_experts(int experts, int top_k, double tokens);   // expected experts hit by `tokens` tokens
double gemm_efficiency(const Hardware& hw, double width);       // mm_eff * w / (w + mm_half_width)

// Bytes the ranks of one replica send, summed over its ranks, per token the
// forward processes, per layer, counted as mxserve's collectives count them
// (comm/comm.h CommStats, so `generate --comm-stats` measures the same
// thing; docs/parallelism.md compares the two). act_bytes per activation on the
// wire: mxserve's collectives send f32 (4); the time model above assumes bf16 (2).
// The all-to-all assumes uniform routing ((P-1)/P of the k rows leave their
// owner); the vocab-parallel logits allgather, (P-1) * vocab * 4 bytes per
// logit row, and the batch broadcast are per forward, not per token, and not here.
// The planner's time model (predict: comm_s) prices these same counts.
struct CommBytes {
  double attn_allreduce = 0;  // every layer, tp > 1: 2 (tp - 1) * hidden * act_bytes
  double ffn_allreduce = 0;   // dense layers, and MoE layers when ep == 1
  double moe_all_to_all = 0;  // MoE layers, ep > 1: dispatch + combine, 2 k (P-1)/P * hidden * act_bytes
  double moe_allgather = 0;   // MoE layers, ep > 1: the owners' outputs, (P-1) * hidden * act_bytes
  double embed_allreduce = 0;  // once per token, tp > 1: the vocab-parallel embedding, 2 (tp - 1) * hidden * act_bytes
  double per_token(const ModelShape& m, const Layout& l) const;  // all layers and the embedding
};
CommBytes comm_bytes(const ModelShape& m, const Layout& l, double act_bytes);

Prediction predict(const ModelShape& m, const Hardware& hw, const Layout& l, const PlanWorkload& w,
                   const PlanOptions& o);

// Every layout of `gpus` accelerators: tp over the divisors of gpus that divide
// the attention heads, dp = gpus / tp, ep in {1, tp, gpus} for MoE models
// (each dividing the expert count).
std::vector<Layout> enumerate_layouts(int gpus, const ModelShape& m, int attention_heads);

// Predictions for every layout, best first: layouts that fit, by total tok/s
// per node (equivalently $/Mtok), then those that do not.
std::vector<Prediction> rank_layouts(const ModelShape& m, const Hardware& hw, const PlanWorkload& w,
                                     const PlanOptions& o, int attention_heads);

}  // namespace mx::plan
