#pragma once
// The interface every architecture implements. A forward runs a batch of new
// tokens from any number of sequences (prefill chunks and decode steps mixed,
// as continuous batching needs), appends their K/V to each sequence's paged
// cache, and returns logits for the tokens the caller asks for.
#include <memory>
#include <string>
#include <vector>

#include "formats/model_config.h"
#include "models/kv_cache.h"
#include "models/weight_binder.h"

namespace mx {

struct LoadStats;  // models/device_weights.h

struct BatchSeq {
  int n_tokens = 0;   // new tokens of this sequence in the batch (consecutive in Batch::tokens)
  int start_pos = 0;  // position of the first of them; K/V of [0, start_pos) are in kv
  SeqKV* kv = nullptr;
};

struct Batch {
  std::vector<int32_t> tokens;
  std::vector<BatchSeq> seqs;
  std::vector<int32_t> logit_rows;  // indices into tokens whose logits are returned, in order
  void clear() {
    tokens.clear();
    seqs.clear();
    logit_rows.clear();
  }
  // Appends a sequence's chunk; if want_logits, its last token's logits are returned.
  void add(SeqKV* kv, const int32_t* toks, int n, int start_pos, bool want_logits);
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // Where the forward runs (backends/backend.h); the KV pool a forward is given
  // must live there (KVPool's backend). Null: host memory (the CPU).
  virtual Backend* backend() const { return nullptr; }
  // KV slots per layer; the MTP layers are layers num_hidden_layers + i of the same pool.
  virtual KVLayout kv_layout() const = 0;
  // Every sequence's kv must already have blocks for positions < start_pos + n_tokens
  // (SeqKV::reserve); forward writes them and sets kv->n_tokens.
  // logits: [batch.logit_rows.size(), vocab_size] f32.
  // hidden (optional): [T, hidden_size], every batch token's last hidden state
  // after the final norm: what the MTP layer consumes (vLLM and sglang pass it so).
  virtual void forward(const Batch& batch, KVPool& kv, float* logits, float* hidden = nullptr) = 0;

  // MTP ("nextn") layers the checkpoint carries (0 for most models).
  virtual int num_mtp_layers() const { return 0; }
  // MTP layer i: batch token at position t is x_{t+1}, prev_hidden[t] the target's
  // hidden state at t; returns logits predicting x_{t+2} for the logit rows, and
  // optionally the layer's own output hidden [T, hidden_size] after
  // shared_head.norm (what the next chained draft step consumes).
  // Writes the MTP layer's own KV (layer num_hidden_layers + i) at positions t.
  virtual void forward_mtp(int i, const Batch& batch, KVPool& kv, const float* prev_hidden,
                           float* logits, float* hidden_out = nullptr);

  // Checkpoint name -> parameter -> dtype/shape for every tensor (mxserve inspect).
  virtual const std::vector<BoundParam>& weight_map() const = 0;
  virtual int64_t parameter_count() const = 0;
  // Weight bytes one decoded token reads (MoE: only the selected experts), and
  // all weight bytes the main model holds.
  virtual size_t bytes_per_token() const = 0;
  virtual size_t weight_bytes() const = 0;
  // What loading this model (this rank's shard) read and placed
  // (models/device_weights.h); null where the model does not count it.
  virtual const LoadStats* load_stats() const { return nullptr; }
};

struct LoadOptions {
  int max_batch_tokens = 512;  // largest batch the activation arena is sized for up front
  // A separately trained MTP head (safetensors in the GLM/DeepSeek nextn layout,
  // model.layers.{num_hidden_layers + i}.*) added to a model without one;
  // tools/train_mtp_head.py writes them.
  std::string mtp_head;
  // Tensor / expert parallel: this rank's cut (comm/shard.h); null = whole model.
  std::shared_ptr<const ShardPlan> shard;
  // The backend the model runs on: "cpu", "cuda[:N]", "hip[:N]" (backends/backend.h).
  std::string backend = "cpu";
  // "auto": the checkpoint at the path; "dummy": config.json alone (the path is
  // a directory holding it, or the file), random weights made in the backend's
  // memory (models/dummy_weights.h).
  std::string load_format = "auto";
  // dummy: how the Linear layers are stored: "bf16", "f32", "fp8" (block FP8)
  // or "mxfp4" (Quark's layout; router gates, lm_head and MTP layers stay bf16
  // as `mxserve quantize` leaves them); "" takes the config's
  // quantization_config when it has one, else bf16.
  std::string dummy_dtype;
  uint64_t dummy_seed = 0;
  // dummy: a JSON object whose top-level keys replace config.json's (vLLM's
  // --hf-overrides), e.g. {"num_hidden_layers": 8} for a shorter stack.
  std::string hf_overrides;
  // CUDA / HIP graphs of decode steps (--gpu-graphs; models/decoder.h): each
  // decode-only batch shape is run once as it comes, captured, and replayed
  // after that. No effect on backends without graphs (the CPU, HIP-CPU).
  bool gpu_graphs = false;
};

// A checkpoint read but not yet bound to a model: its config and tensors.
struct Checkpoint {
  ModelConfig config;
  std::shared_ptr<TensorStore> tensors;
  std::string hf_dir;  // the HF model directory it came from ("" for llama2.c and GGUF)
  std::string gguf_path;  // the GGUF file it came from, if any
};
Checkpoint load_checkpoint(const std::string& path);
std::unique_ptr<Model> build_model(const Checkpoint& ck, const LoadOptions& opts = {});

// Adds the MTP layers of the safetensors file `path` to ck (which must have
// none): every tensor must be named model.layers.{L}.* with L from
// num_hidden_layers on, without gaps; num_nextn_predict_layers is set to their count.
void attach_mtp_head(Checkpoint& ck, const std::string& path);

// The checkpoint load_model binds for `opts`: the files at `path`, the MTP
// head attached, or with --load-format dummy the config alone and an empty
// store the model makes its weights into (one per model: ranks each need their own).
Checkpoint open_checkpoint(const std::string& path, const LoadOptions& opts);

// Loads a model from an HF directory (config.json + safetensors), a GGUF file
// (formats/gguf_model.h) or a llama2.c .bin file.
std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& opts = {});

}  // namespace mx
