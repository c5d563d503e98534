#pragma once
// Prompt lookup decoding (Saxena 2023; vLLM's "ngram" speculator): find the most
// recent earlier occurrence of the sequence's last n tokens (n from ngram_max
// down to ngram_min) in prompt + output and propose the tokens that followed it.
// No weights, no state: it pays off when the output copies from the prompt
// (long, cache-heavy prompts: code edits, RAG, summaries) or repeats itself.
#include "spec/drafter.h"

namespace mx {

// The draft for `tokens` (up to k tokens; empty when no suffix recurs).
void ngram_lookup(std::span<const int32_t> tokens, int n_max, int n_min, int k, std::vector<int32_t>& out);

class NgramDrafter final : public Drafter {
 public:
  NgramDrafter(const SpecOptions& o, int vocab_size) : Drafter(o, vocab_size) {}

 private:
  void draft_tokens(std::span<SpecSeq> seqs, const float* hidden) override;
};

}  // namespace mx
