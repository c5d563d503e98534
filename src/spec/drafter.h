#pragma once
// Drafters propose the next tokens of a sequence for the target to verify in one
// forward (spec/verify.h). Each request's speculative state is a DraftState
// (spec/draft_state.h) that the drafter makes (start), adapts after each
// verification (on_verified) and fills (propose). The engine calls propose once
// per step, after the target forward and verification, with every running
// sequence whose verified positions advanced in that step; the drafter may use
// the target's hidden states of those positions (the MTP drafter does) and
// fills each sequence's next draft. A draft may be shorter than asked, or
// empty (then the sequence decodes one token the plain way in the next step).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sampling/sampling.h"
#include "models/kv_cache.h"
#include "spec/draft_state.h"

namespace mx {

class Model;

enum class SpecMode { off, ngram, mtp };
SpecMode parse_spec_mode(const std::string& s);  // "off" | "ngram" | "mtp"; throws mx::Error otherwise
const char* spec_mode_name(SpecMode m);

struct SpecOptions {
  SpecMode mode = SpecMode::off;
  int steps = 3;           // k: draft tokens per verification
  bool adaptive = false;   // per-sequence k from its recent acceptance
  int ngram_max = 4;       // n-gram lookup: longest suffix to match ...
  int ngram_min = 1;       // ... down to the shortest
  void validate() const;   // throws mx::Error on out-of-range values
};

struct SpecSeq {
  const std::vector<int32_t>* tokens = nullptr;  // prompt + generated so far
  SeqKV* kv = nullptr;
  // Target positions [start, start + n) were computed (and verified) this step;
  // their hidden states are rows [hidden_row, hidden_row + n) of the step's
  // hidden buffer. tokens->size() > start + n always holds.
  int start = 0, n = 0, hidden_row = 0;
  // The most drafts the caller can use next step (max_tokens and the context
  // left; 0 while prefilling: only keep drafter state current).
  int limit = 0;
  DraftState* state = nullptr;  // the request's, from start()

  // Set by Drafter::propose from state before the drafting itself:
  int want = 0;  // draft tokens wanted: limit capped by the adaptive length
  // Sampled requests: the sampler drafts are drawn from (its own RNG, the
  // request's parameters); nullptr for greedy requests, which draft argmax.
  Sampler* draft_sampler = nullptr;
  // Output.
  std::vector<int32_t>* draft = nullptr;
  std::vector<float>* q = nullptr;  // [draft size, vocab] when sampled; left empty for one-hot drafts
};

class Drafter {
 public:
  Drafter(const SpecOptions& opts, int vocab_size) : opts_(opts), vocab_(vocab_size) {}
  virtual ~Drafter() = default;
  // A new request's state: the full draft length (--spec-steps) and, for a
  // sampled request, a draft sampler seeded apart from the request's.
  std::unique_ptr<DraftState> start(const SamplingParams& sampling) const;
  // After a verification of `drafted` drafts of which `accepted` held: with
  // --spec-adaptive, the length asked for next follows acceptance.
  void on_verified(DraftState& state, int drafted, int accepted) const;
  // Fills each sequence's state with its next draft. hidden: [step tokens,
  // hidden_size] target hidden states (after the final norm), or nullptr when
  // needs_hidden() is false.
  void propose(std::span<SpecSeq> seqs, const float* hidden);
  virtual bool needs_hidden() const { return false; }

 protected:
  // The drafting itself: up to s.want tokens into *s.draft (and *s.q).
  virtual void draft_tokens(std::span<SpecSeq> seqs, const float* hidden) = 0;

  SpecOptions opts_;
  int vocab_;
};

std::unique_ptr<Drafter> make_drafter(const SpecOptions& opts, Model& model, KVPool& pool);

}  // namespace mx
