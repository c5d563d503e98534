#pragma once
// Self-distillation data for training an MTP ("nextn") head on a model's own
// generations (tools/train_mtp_head.py): no dataset, only the model.
//
// The model generates `sequences` sequences of `length` tokens from BOS plus one
// random token, a quarter sampled at temperature 1, a quarter at 0.7, and half
// greedy after a short sampled prefix (8 or 32 tokens), so that both sampled and
// greedy decoding see familiar inputs. Then one forward over each whole
// sequence records, at every position t, the target's hidden state after the
// final norm (what the MTP layer consumes; spec/mtp_drafter.h) and its logits
// as the top_k (id, logit) pairs plus the log-sum-exp over the vocabulary.
//
// The file (safetensors) holds tokens I32 [N, L], hidden F32 [N, L, D],
// topk_ids I32 [N, L, K], topk_logits F32 [N, L, K], lse F32 [N, L], and in
// its metadata the model's hidden size, vocabulary and the options. A model
// with an MTP layer adds mtp_top1 I32 [N, L]: the engine's own MTP prediction
// at each row t (token t+1, hidden state of t; -1 in the last row), which the
// trainer's forward must reproduce with the same weights.
#include <cstdint>
#include <memory>
#include <string>

#include "models/model.h"

namespace mx {

struct MtpDataOptions {
  int sequences = 64;
  int length = 256;
  int top_k = 32;
  uint64_t seed = 0;
  int max_running = 16;  // sequences generated at once (continuous batching)
  void validate(const ModelConfig& c) const;  // throws mx::Error naming the bad value
};

struct MtpDataStats {
  int64_t tokens = 0;
  double generate_seconds = 0, forward_seconds = 0;
};

// Takes the model (the serving engine generates with it) and writes `out`.
MtpDataStats write_mtp_data(std::unique_ptr<Model> model, const MtpDataOptions& opts, const std::string& out);

}  // namespace mx
