#pragma once
// The decoder stack every family shares: embed -> N x [pre-norm attention,
// pre-norm feed-forward, residuals] -> final norm -> lm_head, plus optional MTP
// layers (DeepSeek-V3 / GLM-4.5 nextn). Family files (llama.cpp, glm4_moe.cpp,
// deepseek_v3.cpp, qwen3_moe.cpp) bind the weights and choose the blocks; this
// file runs them.
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "models/blocks.h"
#include "backends/device_comm.h"
#include "models/device_weights.h"

namespace mx {

struct DecoderLayer {
  Tensor attn_norm, mlp_norm;
  const float *d_attn_norm = nullptr, *d_mlp_norm = nullptr;  // placed on the backend
  std::unique_ptr<Attention> attn;
  std::unique_ptr<FeedForward> ffn;
  // Tensor parallel: the block's output is this rank's partial sum; the
  // decoder allreduces it (one allreduce per block).
  bool attn_partial = false, ffn_partial = false;
};

// One MTP layer: x = eh_proj([enorm(embed(tok)), hnorm(prev_hidden)]), a full
// decoder layer, then shared_head.norm and shared_head.head.
struct MtpLayer {
  Tensor enorm, hnorm, eh_proj, head_norm, embed, head;
  DecoderLayer block;
  const float *d_enorm = nullptr, *d_hnorm = nullptr, *d_head_norm = nullptr;
  DevWeight d_eh_proj, d_embed, d_head;
};

class DecoderModel final : public Model {
 public:
  DecoderModel(const ModelConfig& c, std::shared_ptr<TensorStore> store,
               std::shared_ptr<const ShardPlan> plan = nullptr)
      : cfg_(c), store_(std::move(store)), plan_(std::move(plan)) {}

  // Filled by the family builder, then finish() is called once.
  Tensor embed, final_norm, lm_head;
  std::vector<DecoderLayer> layers;
  std::vector<MtpLayer> mtp;
  // Before binding: the backend the model will run on (LoadOptions::backend).
  void use_backend(const std::string& spec);
  // --load-format dummy: the binder makes every parameter into the (empty) store.
  void make_dummy(WeightBinder& wb, const LoadOptions& opts);
  // After binding: checks it, places the weights on the backend, sizes the arena.
  void finish(WeightBinder& wb, const LoadOptions& opts);

  const ModelConfig& config() const override { return cfg_; }
  Backend* backend() const override { return backend_.get(); }
  KVLayout kv_layout() const override;
  void forward(const Batch& batch, KVPool& kv, float* logits, float* hidden) override;
  int num_mtp_layers() const override { return int(mtp.size()); }
  void forward_mtp(int i, const Batch& batch, KVPool& kv, const float* prev_hidden, float* logits,
                   float* hidden_out) override;
  const std::vector<BoundParam>& weight_map() const override { return bound_; }
  int64_t parameter_count() const override { return n_params_; }
  size_t bytes_per_token() const override;
  size_t weight_bytes() const override { return weight_bytes_; }
  const LoadStats* load_stats() const override;

  const TensorStore& store() const { return *store_; }
  const ShardPlan* shard() const { return plan_.get(); }
  // Tensor parallel: the LM head holds this rank's vocab rows (vocab-parallel logits).
  bool vocab_parallel() const;

 private:
  int check_batch(const Batch& batch, KVPool& kv, bool mtp) const;  // returns max context
  // Checks the batch, sizes the arena and uploads the batch's tokens, positions,
  // sequences, cache slots, block tables and logit rows.
  ForwardCtx begin(const Batch& batch, KVPool& kv, bool mtp = false);
  void place(DeviceWeights& dw);
  // x = table[ids]: the whole table, or under vocab parallelism this rank's
  // rows (other tokens zero) summed over the ranks.
  void embed_tokens(float* x, const DevWeight& table, int T);
  void run_layer(ForwardCtx& ctx, const DecoderLayer& L, int kv_layer, float* x, float* xn, float* tmp);
  // Tensor parallel: sums a block's partial output over the ranks: on the device
  // with --comm nccl, else host-staged on a device backend.
  void partial_allreduce(float* v, size_t n);
  size_t arena_bytes(int T, int R, size_t table_ints) const;
  ThreadPool& pool() const;
  // Backend logits [R, head.out] = head(norm(x[logit rows])); fetch_logits copies
  // them to the host [R, vocab], gathering vocab slices under tensor parallel.
  float* project_rows(ForwardCtx& ctx, const float* x, int R, const float* norm, const DevWeight& head);
  void fetch_logits(const float* out, int R, int64_t rows_vocab, float* logits);
  // Runs `body` (the ops of one forward after begin(), returning the backend
  // logits) as it comes, or through a graph (LoadOptions::gpu_graphs): a
  // uniform batch's shape (begin()) is run once eagerly (the warm-up, which also grows
  // every workspace it needs), then captured; later steps of that shape replay
  // the graph, reading the metadata begin() uploaded to the same arena addresses.
  float* run_steps(const ForwardCtx& ctx, int mtp_index, bool hidden, const std::function<float*()>& body);

  ModelConfig cfg_;
  std::shared_ptr<TensorStore> store_;
  std::shared_ptr<const ShardPlan> plan_;
  std::vector<BoundParam> bound_;
  int64_t n_params_ = 0;
  size_t weight_bytes_ = 0;
  std::shared_ptr<Backend> backend_;
  std::shared_ptr<DummyWeights> dummy_;  // --load-format dummy
  std::unique_ptr<DeviceWeights> dw_;
  std::unique_ptr<DevArena> arena_;
  DevWeight d_embed_, d_lm_head_;
  const float* d_final_norm_ = nullptr;
  // Graphs: what a captured step needs to be replayed, by batch shape.
  struct GraphKey {
    const void *k, *v;  // the KV pool's layer-0 storage (its pointers are in the graph)
    int dtype, T, S, table_stride, mtp_index, hidden;
    auto operator<=>(const GraphKey&) const = default;
  };
  struct Graph {
    uint64_t id = 0;
    float* out = nullptr;    // the logits the captured body wrote
    size_t arena_end = 0;    // the arena mark after it
  };
  static constexpr int kMaxGraphTokens = 64;       // larger batches run eagerly
  static constexpr int kMaxGraphTokensPerSeq = 9;  // decode (1), verification of up to 8 drafts
  bool gpu_graphs_ = false;
  bool graph_batch_ = false;   // begin(): this batch may run as a graph
  int table_stride_ = 0, graph_seqs_ = 0;  // begin(): the batch's table stride and sequences
  const void* graph_arena_ = nullptr;
  std::map<GraphKey, Graph> graphs_;
  // The current batch's metadata, built on the host, uploaded by begin().
  std::vector<int32_t> h_meta_;
  const int32_t *d_ids_ = nullptr, *d_rows_ = nullptr;
  const int32_t* d_local_ids_ = nullptr;  // vocab parallel: ids in this rank's rows, -1 elsewhere
  std::vector<float> h_logits_;  // vocab-parallel gather
  std::vector<float> stage_;     // host staging of a device backend's collectives
  // --comm nccl (ShardPlan::device_comm): NCCL / RCCL on device buffers instead
  // of host staging; gather_ receives the vocab-parallel logits.
  std::unique_ptr<DeviceComm> dcomm_;
  DevBuffer gather_;
};

// model.embed_tokens, model.norm and lm_head (or the tied embedding).
void bind_embed_and_head(WeightBinder& wb, const ModelConfig& c, DecoderModel& m);

// Binds a pre-norm decoder layer's two norms (input_layernorm,
// post_attention_layernorm) under prefix "model.layers.{i}".
void bind_layer_norms(WeightBinder& wb, const std::string& prefix, const ModelConfig& c,
                      DecoderLayer& L);

// A whole decoder layer at model.layers.{index}: norms, attention (MLA when the
// config says so, else GQA) and feed-forward (MoE where config.is_moe_layer,
// else a dense SwiGLU MLP of intermediate_size).
void bind_decoder_layer(WeightBinder& wb, const ModelConfig& c, int index, DecoderLayer& L);

// The main stack and MTP layers of an MoE family (GLM-4.5, DeepSeek-V3,
// Qwen3-MoE): embed, num_hidden_layers decoder layers, norm, lm_head, then
// num_nextn_predict_layers MTP layers at model.layers.{num_hidden_layers + i}.
std::unique_ptr<Model> build_decoder(const ModelConfig& c, std::shared_ptr<TensorStore> store,
                                     const LoadOptions& opts);

// Binds the MTP-specific tensors of layer `prefix` (enorm, hnorm, eh_proj,
// shared_head.norm, and embed_tokens / shared_head.head when the checkpoint
// stores them: GLM-4.5 and DeepSeek-V3 do, GLM-4.6 does not and shares the main
// model's; docs/architectures.md 1.3).
void bind_mtp_head(WeightBinder& wb, const std::string& prefix, const ModelConfig& c,
                   const DecoderModel& m, MtpLayer& mtp);

}  // namespace mx
