#pragma once
// One request's speculative-decoding state: the draft for its next step, the
// distributions the draft was drawn from, the sampler it is drawn with, and the
// adaptive draft length. Drafter::start makes it, the request owns it (the
// engine holds it as a std::unique_ptr), and only the drafter and
// verify_drafts read its fields: the engine asks how many drafts are ready and
// for the verification input, nothing else. So the draft-length policy and the
// draft RNG live next to the drafters that use them, as vLLM v1 keeps the
// proposer's state out of its scheduler (which sees only spec_token_ids) and
// sglang keeps it in the draft worker's EagleDraftInput.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "sampling/sampling.h"
#include "spec/verify.h"

namespace mx {

class DraftState {
 public:
  // Drafts ready for the next step (0: the sequence decodes the plain way).
  int size() const { return int(draft_.size()); }
  // The input of a step that verifies the first k drafts: the sequence's last
  // token, then drafts 1..k. Stays valid until the next call or the next draft.
  std::span<const int32_t> verify_input(int32_t last, int k);
  // Drops the draft: the sequence lost its KV (preempted or finished), so the
  // draft no longer continues what it will compute next.
  void clear();

 private:
  friend class Drafter;
  friend int verify_drafts(Sampler&, const float*, const DraftState&, int, const std::vector<int32_t>&,
                           const EmitToken&, VerifyScratch&, const PrepareRow&);

  std::vector<int32_t> draft_;
  std::vector<float> q_;              // [draft size, vocab] when sampled; empty for one-hot drafts
  std::unique_ptr<Sampler> sampler_;  // sampled requests: drafts' own RNG; null for greedy ones (argmax)
  int k_ = 0;                         // draft length to ask for next (adaptive: follows acceptance)
  std::vector<int32_t> verify_input_;
};

}  // namespace mx
