#pragma once
// Mixture-of-experts feed-forward: a router picks num_experts_per_tok experts
// per token; only those experts' weights are read. Two router families
// (docs/architectures.md 1.4, 2.6, 3.3):
//   sigmoid (DeepSeek-V3, GLM-4.5): s = sigmoid(x W_r^T) in fp32; choice by
//     s + e_score_correction_bias with grouped top-k (top topk_group of n_group
//     groups, a group scored by the sum of its two best biased scores, the
//     others masked to -inf as the DeepSeek reference and vLLM do); weights =
//     unbiased s of the chosen, optionally renormalised, times
//     routed_scaling_factor; shared experts always added with weight 1.
//   softmax (Qwen3-MoE): p = softmax(x W_r^T) in fp32, top-k, optional renormalise.
// Execution (Backend::moe_ffn): tokens are grouped by expert, each active expert runs one GEMM
// over its tokens; each token's expert outputs are combined in ascending expert
// order, so the result does not depend on what else is in the batch.
// Parallel (comm/shard.h): under tensor parallel every expert's hidden dim
// is split (the output is a partial sum the decoder allreduces); under expert
// parallel each rank holds E / P whole experts, and the tokens (each rank owns
// a contiguous T / P of them) are dispatched to their experts' ranks with an
// all-to-all, computed there, sent back with a second all-to-all, combined by
// their owner in the same ascending expert order, and allgathered: the result
// is bitwise the one-rank result.
// On a device backend (GPUs, HIP-CPU) the same dispatch is host-staged (issue
// 23's fallback, as DecoderModel::partial_allreduce does for TP): the routing
// and this layer's input are downloaded, the rows travel through the host
// communicator, this rank's experts run on the device as one grouped moe_ffn
// over its stack of E / P experts (k = 1, weight 1), and the owner combines on
// the host and uploads the gathered output. Every expert id is checked against
// [0, E) on the host before it indexes anything (the router's output is data).
#include <memory>
#include <vector>

#include "backends/route_impl.h"
#include "models/blocks.h"

namespace mx {

class MoeBlock final : public FeedForward {
 public:
  static constexpr int kMaxExperts = kMaxRouteExperts;
  // prefix: "model.layers.{i}.mlp"
  MoeBlock(WeightBinder& wb, const std::string& prefix, const ModelConfig& c);
  void place(DeviceWeights& dw) override;
  void forward(ForwardCtx& ctx, const float* x, float* out) const override;
  size_t scratch_bytes(int T) const override;
  size_t bytes_per_token() const override;

  // Routing of one token from its router logits: writes k expert ids (ascending)
  // and their weights. Public for tests.
  void route(const float* logits, int32_t* idx, float* w) const;

 private:
  void forward_ep(ForwardCtx& ctx, const float* x, const int32_t* idx, const float* w, float* out) const;
  // forward_ep's expert step on a device backend: rows recvx [n_recv, H] through
  // local experts recv_expert - e0 into res; the shared expert over the rank's
  // own tokens x[t0, t0 + tn) (device memory) into own. All pointers but x host.
  void run_pairs_on_device(ForwardCtx& ctx, const float* recvx, const int32_t* recv_expert, int n_recv,
                           float* res, const float* x, int t0, int tn, float* own) const;

  // Host buffers of the expert-parallel dispatch (one model per rank, one
  // forward at a time, so a member is safe; kept to reuse their capacity).
  struct EpScratch {
    std::vector<float> x, w, sendx, recvx, res, back, slots, own, all;
    std::vector<int32_t> idx, send_pair, recv_expert, recv_row, local_ids;
    std::vector<float> ones;
  };
  mutable EpScratch ep_;

  MoeConfig m_;
  int dim_;
  Tensor router_, bias_;
  std::vector<float> bias_f32_;  // bias_ as f32, for route_token
  std::vector<std::unique_ptr<SwigluMlp>> experts_;  // null for other ranks' experts (EP)
  std::unique_ptr<SwigluMlp> shared_;
  ShardPlan plan_;
  int expert_hidden_ = 0;
  size_t expert_bytes_ = 0;
  DevWeight d_router_;
  RouteArgs d_route_;
  ExpertWeights d_experts_;
  // Expert parallel on a device backend: this rank's experts [e0_, e0_ + el_) as one stack.
  ExpertWeights d_local_;
  int e0_ = 0, el_ = 0;
};

}  // namespace mx
