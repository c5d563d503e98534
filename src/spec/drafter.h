#pragma once
// Drafters propose the next tokens of a sequence for the target to verify in one
// forward (spec/verify.h). The engine calls a drafter once per step, after the
// target forward and verification, with every running sequence whose verified
// positions advanced in that step; the drafter may use the target's hidden
// states of those positions (the MTP drafter does) and fills each sequence's
// next draft. A draft may be shorter than asked, or empty (then the sequence
// decodes one token the plain way in the next step).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sampling/sampling.h"
#include "models/kv_cache.h"

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
  int want = 0;  // draft tokens wanted for the next step (0: only keep drafter state current)
  // Sampled requests: the sampler drafts are drawn from (its own RNG, the
  // request's parameters); nullptr for greedy requests, which draft argmax.
  Sampler* draft_sampler = nullptr;
  // Output.
  std::vector<int32_t>* draft = nullptr;
  std::vector<float>* q = nullptr;  // [draft size, vocab] when sampled; left empty for one-hot drafts
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // hidden: [step tokens, hidden_size] target hidden states (after the final
  // norm), or nullptr when needs_hidden() is false.
  virtual void propose(std::span<SpecSeq> seqs, const float* hidden) = 0;
  virtual bool needs_hidden() const { return false; }
};

std::unique_ptr<Drafter> make_drafter(const SpecOptions& opts, Model& model, KVPool& pool);

}  // namespace mx
