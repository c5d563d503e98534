#pragma once
// A loaded decoder model (models/decoder.h) run on any Backend (kernels/backend.h):
// its weights copied into backend memory once, its KV cache in backend memory,
// every op of the forward pass on the backend. This is how a model runs on a
// GPU (--backend cuda|hip); on the CPU backend it is the same computation as
// DecoderModel::forward through Backend's ops (tests compare the two).
//
// Scope: one sequence at a time (the single-stream workload), GQA attention
// with dense SwiGLU or MoE feed-forward layers (Llama, Qwen3, Qwen3-MoE,
// GLM-4.5). MLA (DeepSeek-V3) and sharded models are refused with a clear error.
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "models/decoder.h"

namespace mx {

class BackendDecoder {
 public:
  // max_ctx: the longest sequence (KV capacity); max_tokens: the longest chunk one forward takes.
  BackendDecoder(const DecoderModel& model, Backend& backend, int max_ctx, int max_tokens = 512);
  ~BackendDecoder();

  // Runs tokens[0..n) at positions start_pos.. (the KV of [0, start_pos) already
  // written by earlier calls) and leaves the last token's logits on the backend.
  void forward(const int32_t* tokens, int n, int start_pos);
  // The last forward's logits, copied to the host ([vocab] floats).
  void logits(float* out) const;
  // The next token from the last forward's logits, chosen on the backend
  // (temperature 0: argmax; else a Gumbel-max draw keyed by seed).
  int32_t next_token(float temperature, uint64_t seed);

  Backend& backend() const { return b_; }
  const ModelConfig& config() const { return m_.config(); }
  int max_tokens() const { return max_tokens_; }
  size_t weight_bytes() const { return weight_bytes_; }
  int max_ctx() const { return max_ctx_; }

 private:
  struct Layer;
  DevWeight upload(const Tensor& t);
  DevWeight upload_stack(const std::vector<const Tensor*>& experts);
  const float* upload_f32(const Tensor& t);  // a norm / bias vector as f32
  const float* upload_floats(const std::vector<float>& v);
  float* scratch(size_t floats);

  const DecoderModel& m_;
  Backend& b_;
  int max_ctx_, max_tokens_;
  std::vector<DevBuffer> owned_;
  std::vector<Layer> layers_;
  DevWeight embed_, head_;
  const float* final_norm_ = nullptr;
  // Activations and KV (f32), sized once.
  float *x_, *xn_, *tmp_, *tmp2_, *q_, *k_, *v_, *attn_, *g_, *u_, *router_logits_, *moe_w_, *logits_;
  int32_t *ids_, *pos_, *slots_, *table_, *zero_, *moe_ids_, *next_;
  size_t weight_bytes_ = 0;
};

}  // namespace mx
