// The planner's arithmetic on hand-checked cases, and the seed's qualitative
// result (prefill-heavy, 60% cached, large MoE, 8 GPUs: TP4xDP2 beats TP8).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/model_config.h"
#include "devtools/planner/hardware.h"
#include "devtools/planner/model_shape.h"
#include "devtools/planner/roofline.h"
#include "test_util.h"

using namespace mx::plan;

namespace {
// hidden 64, 2 layers, 4 heads of 16 (q 64), 2 KV heads (kv 32), FFN 128, vocab 100.
mx::ModelConfig toy_dense() {
  return mx::parse_hf_config(nlohmann::json{{"architectures", {"LlamaForCausalLM"}},
                                            {"hidden_size", 64},
                                            {"intermediate_size", 128},
                                            {"num_hidden_layers", 2},
                                            {"num_attention_heads", 4},
                                            {"num_key_value_heads", 2},
                                            {"vocab_size", 100},
                                            {"max_position_embeddings", 256}});
}

// 1 GB/s, 10 GFLOP/s, 100 GB/s links, no latency, efficiencies 1.
Hardware toy_hw(int per_node) {
  Hardware h;
  h.name = "toy";
  h.per_node = per_node;
  h.mem_gb = 1;
  h.mem_bw_gbs = 1;
  h.tflops_bf16 = 0.01;
  h.link_gbs = 100;
  h.link_latency_us = 0;
  h.bw_eff = h.mm_eff = h.link_eff = 1;
  h.mm_half_width = 0;
  return h;
}

mx::ModelConfig deepseek_v3() {
  return mx::load_hf_config((mxtest::source_dir() / "tests/data/plan/deepseek_v3_config.json").string());
}

const Prediction& find(const std::vector<Prediction>& v, int tp, int dp, int ep) {
  for (const auto& p : v)
    if (p.layout.tp == tp && p.layout.dp == dp && p.layout.ep == ep) return p;
  throw std::runtime_error("layout not ranked");
}
}  // namespace

TEST(PlanShape, DenseCountsByHand) {
  const ModelShape s = model_shape(toy_dense());
  EXPECT_DOUBLE_EQ(s.attn_params, 2 * (2 * 64 * 64 + 2 * 64 * 32));  // q, o: 64x64; k, v: 64x32
  EXPECT_DOUBLE_EQ(s.dense_ffn_params, 2 * 3 * 64 * 128);
  EXPECT_DOUBLE_EQ(s.kv_bytes_per_token, 2 * 2 * 2 * 32);             // layers x (k, v) x bf16 x kv_dim
  EXPECT_DOUBLE_EQ(s.attn_flops_per_pos_prefill, 2 * 2 * (64 + 64));  // layers x 2 x (QK + AV)
  EXPECT_DOUBLE_EQ(s.total_params(), 24576 + 49152 + 6400 + 6400);
  EXPECT_EQ(s.moe_layers, 0);
}

TEST(PlanShape, DeepSeekV3Is671B) {
  const ModelShape s = model_shape(deepseek_v3());
  EXPECT_NEAR(s.total_params() / 1e9, 671.0, 1.0);  // DeepSeek's 671B without the 14B MTP module
  EXPECT_NEAR(s.active_params() / 1e9, 35.7, 1.0);  // 37B active incl. embeddings/lm_head
  EXPECT_EQ(s.moe_layers, 58);
  EXPECT_DOUBLE_EQ(s.kv_bytes_per_token, 61 * 2 * (512 + 64));
  EXPECT_FALSE(s.kv_split_by_tp);
}

TEST(PlanRoofline, CollectivesAndExperts) {
  const Hardware h = toy_hw(8);
  EXPECT_DOUBLE_EQ(allreduce_s(1e9, 4, h), 2.0 * 3 / 4 * 1e9 / 100e9);
  EXPECT_DOUBLE_EQ(allreduce_s(1e9, 1, h), 0);
  EXPECT_DOUBLE_EQ(all_to_all_s(8e9, 8, h), 7.0 / 8 * 8e9 / 100e9);
  Hardware lat = h;
  lat.link_latency_us = 10;
  EXPECT_NEAR(allreduce_s(0, 8, lat), 14 * 10e-6, 1e-15);
  EXPECT_DOUBLE_EQ(unique_experts(8, 2, 1), 2);
  EXPECT_DOUBLE_EQ(unique_experts(8, 2, 2), 8 * (1 - 0.75 * 0.75));
  EXPECT_NEAR(unique_experts(256, 8, 1e4), 256, 1e-6);
  Hardware g = h;
  g.mm_eff = 0.5;
  g.mm_half_width = 100;
  EXPECT_DOUBLE_EQ(gemm_efficiency(g, 100), 0.25);
}

TEST(PlanRoofline, DenseSingleDeviceByHand) {
  const ModelShape s = model_shape(toy_dense());
  PlanWorkload w;
  w.input = 10;
  w.output = 4;
  w.concurrency = 1;
  const Prediction p = predict(s, toy_hw(1), {1, 1, 1}, w, {});
  ASSERT_TRUE(p.fits);
  EXPECT_NEAR(p.weights_gb_per_gpu, 173056e-9, 1e-15);  // (24576 + 49152 + 2 x 6400) x 2 bytes
  // Decode at context 10 + 4/2: weights + lm_head + 12 positions of KV, at 1 GB/s.
  EXPECT_NEAR(p.decode_mem_s, (147456 + 12800 + 12 * 256) * 1e-9, 1e-15);
  EXPECT_NEAR(p.decode_compute_s, (2 * 73728 + 2 * 6400 + 512 * 12) * 1e-10, 1e-15);
  EXPECT_NEAR(p.decode_step_s, p.decode_mem_s, 1e-15);  // bandwidth-bound
  // Prefill of 10 tokens: 2 x params x 10 + causal attention 512 x 10^2 / 2 + the last token's logits, at 10 GFLOP/s.
  EXPECT_NEAR(p.prefill_compute_s, (2 * 10 * 73728 + 512 * 50 + 2 * 6400) * 1e-10, 1e-15);
  EXPECT_NEAR(p.prefill_mem_s, 147456e-9, 1e-15);
  EXPECT_NEAR(p.prefill_s, p.prefill_compute_s, 1e-15);
  EXPECT_EQ(p.prefill_comm_s, 0);
  const double round = p.prefill_s + 4 * p.decode_step_s;
  EXPECT_NEAR(p.output_tok_s_node, 4 / round, 1e-9 * p.output_tok_s_node);
  EXPECT_NEAR(p.total_tok_s_node, 14 / round, 1e-9 * p.total_tok_s_node);
}

TEST(PlanRoofline, TensorParallelCommunicationByHand) {
  const ModelShape s = model_shape(toy_dense());
  PlanWorkload w;
  w.input = 10;
  w.output = 4;
  w.concurrency = 1;
  const Prediction p = predict(s, toy_hw(2), {2, 1, 1}, w, {});
  // 2 layers x 2 all-reduces, and the vocab-parallel embedding's, of 10 tokens x 64 x 2 bytes over 2 ranks.
  EXPECT_NEAR(p.prefill_comm_s, 5 * (2.0 * 1 / 2 * 1280 / 100e9), 1e-20);
  EXPECT_NEAR(p.decode_comm_s, 5 * (2.0 * 1 / 2 * 128 / 100e9), 1e-20);
  // Half the weights per device; KV heads split.
  EXPECT_NEAR(p.weights_gb_per_gpu, 173056e-9 / 2, 1e-15);
}

TEST(PlanRoofline, CapacityAndCacheHitRate) {
  const ModelShape s = model_shape(toy_dense());
  Hardware h = toy_hw(2);
  h.mem_gb = 1e-3;  // 1 MB: 900 kB usable minus 173 kB of weights = 2840 tokens of KV
  PlanWorkload w;
  w.input = 1000;
  w.output = 100;
  w.cached_fraction = 0.5;
  w.concurrency = 2;
  w.prefix_groups = 2;
  PlanOptions o;
  const Prediction one = predict(s, h, {1, 2, 1}, w, o);
  ASSERT_TRUE(one.fits);
  EXPECT_NEAR(one.kv_tokens_per_replica, (0.9e6 - 173056) / 256, 1e-6);
  // Each replica: 1 request (500 new + 100 out) + its one prefix group (500) fits: full hit rate.
  EXPECT_DOUBLE_EQ(one.hit_rate, 0.5);
  w.prefix_groups = 8;  // 4 groups per replica need 2000 tokens; room 2840 - 600 = 2240 is enough
  EXPECT_DOUBLE_EQ(predict(s, h, {1, 2, 1}, w, o).hit_rate, 0.5);
  w.prefix_groups = 12;  // 6 groups: 3000 > 2240: hit rate scales down
  EXPECT_NEAR(predict(s, h, {1, 2, 1}, w, o).hit_rate, 0.5 * (one.kv_tokens_per_replica - 600) / 3000, 1e-12);
  w.concurrency = 10;  // 5 per replica: 3000 + 500 tokens do not fit
  EXPECT_FALSE(predict(s, h, {1, 2, 1}, w, o).fits);
  EXPECT_THROW(predict(s, h, {1, 2, 1}, PlanWorkload{"x", 0, 1, 0, 1, 1}, o), mx::Error);
}

TEST(PlanRoofline, LayoutsOfANode) {
  const ModelShape moe = model_shape(deepseek_v3());
  const auto l = enumerate_layouts(8, moe, 128);
  ASSERT_EQ(l.size(), 10u);  // tp 1: ep 1, 8; tp 2: 1, 2, 8; tp 4: 1, 4, 8; tp 8: 1, 8
  for (const auto& x : l) EXPECT_EQ(x.gpus(), 8);
  EXPECT_EQ(enumerate_layouts(8, model_shape(toy_dense()), 4).size(), 3u);  // tp 8 does not divide 4 heads
  EXPECT_EQ((Layout{4, 2, 1}).name(), "TP4xDP2");
  EXPECT_EQ((Layout{1, 8, 8}).name(), "TP1xDP8xEP8");
}

TEST(PlanRoofline, HardwareTable) {
  EXPECT_DOUBLE_EQ(find_hardware("h100").tflops(WeightDType::MXFP4), 1979);  // no FP4: computes in FP8
  EXPECT_DOUBLE_EQ(find_hardware("mi355x").tflops(WeightDType::MXFP4), 10000);
  EXPECT_DOUBLE_EQ(find_hardware("mi300x").tflops(WeightDType::BF16), 1307.4);
  for (const char* n : {"mi355x", "mi300x", "b200", "b300", "h200", "h100", "cpu"})
    EXPECT_FALSE(find_hardware(n).source.empty()) << n;
  EXPECT_THROW(find_hardware("tpu"), mx::Error);
  EXPECT_THROW(parse_weight_dtype("int3"), mx::Error);
}

// The seed's result, from the model's arithmetic: for a large MoE with a
// prefill-heavy, 60%-cached workload on 8 accelerators, TP4xDP2 gives more
// tokens per node than TP8, because TP8 pays more all-reduce traffic per token
// (2(n-1)/n: 1.75 vs 1.5, for all the node's tokens instead of half) and runs
// narrower GEMM shards, while DP2 runs two prefill pipelines at once.
TEST(PlanRoofline, Tp4Dp2BeatsTp8ForPrefillHeavyMoE) {
  const ModelShape m = model_shape(deepseek_v3());
  PlanWorkload w;
  w.input = 20000;
  w.output = 1000;
  w.cached_fraction = 0.6;
  w.concurrency = 64;
  PlanOptions o;
  o.dtype = WeightDType::FP8;
  for (const char* hw : {"mi355x", "b300"}) {
    const auto ranked = rank_layouts(m, find_hardware(hw), w, o, 128);
    const Prediction& tp4 = find(ranked, 4, 2, 1);
    const Prediction& tp8 = find(ranked, 8, 1, 1);
    ASSERT_TRUE(tp4.fits && tp8.fits) << hw;
    EXPECT_DOUBLE_EQ(tp4.hit_rate, 0.6);
    EXPECT_DOUBLE_EQ(tp8.hit_rate, 0.6);
    EXPECT_GT(tp4.total_tok_s_node, 1.1 * tp8.total_tok_s_node) << hw;
    EXPECT_GT(tp4.prefill_tok_s_node, tp8.prefill_tok_s_node) << hw;
    // Per node-token, TP8 spends more time on all-reduces (the mechanism, not a rule).
    EXPECT_GT(tp8.prefill_comm_s, tp4.prefill_comm_s / 2 * 1.5) << hw;
    // And ranks below it overall.
    size_t i4 = 0, i8 = 0;
    for (size_t i = 0; i < ranked.size(); ++i) {
      if (&ranked[i] == &tp4) i4 = i;
      if (&ranked[i] == &tp8) i8 = i;
    }
    EXPECT_LT(i4, i8) << hw;
  }
}

// The per-layer bytes `generate --comm-stats` measures (devtools/planner/roofline.h
// comm_bytes), hand-checked: hidden 64, f32 on the wire (256 bytes a row).
TEST(Roofline, CommBytesPerLayerCountWhatTheCollectivesSend) {
  ModelShape m;
  m.layers = 4, m.moe_layers = 3, m.hidden = 64, m.top_k = 2, m.experts = 8;
  // TP2: each allreduce sends 2 (P-1) rows over the ranks; every layer has two.
  CommBytes tp = comm_bytes(m, Layout{2, 1, 1}, 4.0);
  EXPECT_EQ(tp.attn_allreduce, 2 * 256);
  EXPECT_EQ(tp.ffn_allreduce, 2 * 256);
  EXPECT_EQ(tp.moe_all_to_all, 0);
  EXPECT_EQ(tp.embed_allreduce, 2 * 256);
  EXPECT_EQ(tp.per_token(m, Layout{2, 1, 1}), 8 * 512 + 512);  // and the vocab-parallel embedding's
  // TP2 x EP2: MoE layers send k rows half of the time, twice, and gather one row; no FFN allreduce there.
  const Layout tpep{2, 1, 2};
  CommBytes e = comm_bytes(m, tpep, 4.0);
  EXPECT_EQ(e.moe_all_to_all, 2 * 2 * 0.5 * 256);
  EXPECT_EQ(e.moe_allgather, 256);
  EXPECT_EQ(e.per_token(m, tpep), 512 + 4 * 512 + 1 * 512 + 3 * (512 + 256));
  // EP alone (attention replicated): only the MoE layers communicate.
  CommBytes ep = comm_bytes(m, Layout{1, 1, 2}, 2.0);
  EXPECT_EQ(ep.attn_allreduce, 0);
  EXPECT_EQ(ep.per_token(m, Layout{1, 1, 2}), 3 * (2 * 2 * 0.5 * 128 + 128));
}

// The time model prices comm_bytes' counts: a rank's link carries 1/P of each
// collective's bytes, plus its latency steps (hand-checked, EP2 on 2 GPUs).
TEST(PlanRoofline, ExpertParallelCommunicationIsPricedFromCommBytes) {
  ModelShape m;
  m.layers = 4, m.moe_layers = 3, m.hidden = 64, m.top_k = 2, m.experts = 8;
  m.vocab = 320, m.attn_params = 4 * 16384, m.dense_ffn_params = 30000, m.expert_params = 12288;
  m.embed_params = m.lm_head_params = 320 * 64, m.kv_bytes_per_token = 1024, m.dense_width = 160, m.expert_width = 64;
  PlanWorkload w;
  w.input = 10, w.output = 4, w.concurrency = 1;
  Hardware h = toy_hw(2);
  const Prediction p = predict(m, h, {1, 1, 2}, w, {});
  const CommBytes c = comm_bytes(m, Layout{1, 1, 2}, 2.0);
  const double bw = h.link_gbs * 1e9 * h.link_eff, lat = h.link_latency_us * 1e-6;
  EXPECT_NEAR(p.prefill_comm_s, 3 * (10 * (c.moe_all_to_all + c.moe_allgather) / 2 / bw + 3 * lat), 1e-15);
  EXPECT_NEAR(p.decode_comm_s, 3 * (1 * (c.moe_all_to_all + c.moe_allgather) / 2 / bw + 3 * lat), 1e-15);
}
