#pragma once
// Verification of speculative drafts against the target model's logits.
//
// The target ran one forward over [last, d_1 .. d_k]; row i of `rows` holds its
// logits after consuming d_i (row 0: after `last`). Tokens are emitted one at a
// time through `emit`, which the caller uses to append them to the sequence (so
// `history`, the penalties' token list, grows as drafts are accepted) and to stop
// early (EOS, stop ids, max_tokens) by returning false.
//
// Greedy requests: the target's own pick at each row is emitted and a draft is
// accepted while it equals that pick; the output is token for token what plain
// decoding produces (the kernels are batch- and chunk-invariant).
//
// Sampled requests: standard speculative rejection sampling (Leviathan et al.
// 2023, Chen et al. 2023). Draft d_i, drawn from the drafter's distribution q_i,
// is accepted with probability min(1, p_i(d_i) / q_i(d_i)); on rejection a token
// is drawn from max(0, p_i - q_i), renormalised; if all k are accepted a bonus
// token is drawn from p_k. Every emitted token is then distributed exactly as
// the target's sampler would draw it. Deterministic drafters (n-gram lookup)
// pass q = nullptr, meaning q_i is one-hot at d_i.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "sampling/sampling.h"

namespace mx {

// Returns true to continue, false when the sequence has finished.
using EmitToken = std::function<bool(int32_t token, int row)>;
// Called before row `row` of the logits is read, after the tokens of the rows
// before it were emitted (a structured-output mask, which depends on them).
using PrepareRow = std::function<void(int row)>;

struct VerifyScratch {
  std::vector<float> p, w;
};

// rows: [draft.size() + 1, vocab] target logits. q: [draft.size(), vocab] draft
// probabilities or nullptr. Returns how many drafts were accepted (emitted as
// themselves); at most one more token (correction or bonus) is emitted after them.
int verify_drafts(Sampler& sampler, const float* rows, std::span<const int32_t> draft, const float* q,
                  const std::vector<int32_t>& history, const EmitToken& emit, VerifyScratch& scratch,
                  const PrepareRow& prepare = {});

}  // namespace mx
