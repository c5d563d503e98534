#pragma once
// Drafting with the model's own MTP ("nextn") layer, chained on its own hidden
// state for k steps (DeepSeek-V3 / GLM-4.5 MTP used EAGLE-style, as sglang does).
//
// MTP layer slot t consumes (token x_{t+1}, target hidden h_t) and predicts
// x_{t+2}. After every target step the drafter "catches up": it runs the MTP
// layer over the positions the target just verified, with the target's true
// hidden states, which writes the MTP layer's KV for them; the last row's
// logits give draft 1. Drafts 2..k chain: slot t+1 takes (draft 1, the MTP
// layer's own output hidden at t), and so on. Chained slots are approximations
// that the next catch-up overwrites with the target's hidden states.
//
// The MTP KV lives in the target's pool and block table (layers
// num_hidden_layers + i), so it is paged, preempted and freed with the
// sequence. Blocks shared through the prefix cache carry the MTP KV of
// whoever computed them; its last slot may stem from a different next token.
// That costs acceptance at worst, never correctness: the target verifies.
#include "models/model.h"
#include "spec/drafter.h"

namespace mx {

class MtpDrafter final : public Drafter {
 public:
  MtpDrafter(const SpecOptions& o, Model& model, KVPool& pool);
  bool needs_hidden() const override { return true; }

 private:
  void draft_tokens(std::span<SpecSeq> seqs, const float* hidden) override;
  // Appends the next draft token of s (and its q row) drawn from MTP logits lg.
  void draw(SpecSeq& s, const float* lg);

  Model& model_;
  KVPool& pool_;
  int D_;
  Batch batch_;
  std::vector<float> prev_, hidden_out_, logits_;
  std::vector<int> active_;  // sequences in the current MTP batch, in batch order
  std::vector<int> next_, next_pos_;  // the next chained step's sequences and their positions
  std::vector<float> next_prev_;      // ... and the hidden states they continue from
};

}  // namespace mx
