#pragma once
// Token sampling: penalties -> temperature -> top-k -> top-p -> min-p -> draw.
//
// Determinism: a seed gives the same tokens on every platform, compiler and library
// version. The RNG (xoshiro256**, seeded through splitmix64) and the exp() of the softmax
// are our own and use only IEEE + and * (sampling.cpp turns FMA contraction off; SIMD and
// scalar paths give identical bits); orderings use a total order (logit desc, id asc) and
// our own selection code, and every sum is taken in a fixed order. No std:: distribution.
#include <cstdint>
#include <span>
#include <vector>

namespace mx {

struct SamplingParams {
  float temperature = 1.0f;   // 0 (or < 1e-5) = greedy
  int top_k = 0;              // 0 = off
  float top_p = 1.0f;         // (0, 1]; 1 = off
  float min_p = 0.0f;         // [0, 1]; 0 = off
  uint64_t seed = 0;
  float presence_penalty = 0.0f;    // OpenAI semantics, [-2, 2]
  float frequency_penalty = 0.0f;   // OpenAI semantics, [-2, 2]
  float repetition_penalty = 1.0f;  // HF semantics, > 0; 1 = off

  // Throws mx::Error naming the offending field for NaN / out-of-range values.
  void validate() const;
  bool greedy() const;  // temperature below 1e-5 (as vLLM)
};

// xoshiro256** (Blackman & Vigna), state filled from the seed with splitmix64.
// Portable and bit-exact on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed);
  uint64_t next_u64();
  // Uniform in [0, 1): the 24 high bits of next_u64() times 2^-24.
  float uniform() { return static_cast<float>(next_u64() >> 40) * 0x1.0p-24f; }

 private:
  uint64_t s_[4];
};

// Index of the largest element; lowest index on ties; NaNs are skipped (treated as
// smaller than everything, -inf included). All-NaN input returns 0. Requires n > 0.
int32_t argmax(const float* x, int64_t n);

// Draws index i with probability weights[i] / sum(weights) using one uniform u in [0,1)
// (e.g. Rng::uniform()); weights must be >= 0 with a positive sum (throws otherwise).
// For speculative decoding's residual distribution max(0, p - q).
int32_t sample_categorical(std::span<const float> weights, float u);

// One Sampler per sequence. All scratch is allocated in the constructor: sample() and
// probs() never touch the heap. Cost is a few linear passes over the vocabulary; top-k
// uses a bounded heap (k <= 256) or a sampled cut-off plus quickselect, and top-p selects
// only the nucleus (weighted quickselect) after dropping tokens it can never reach.
//
// Pipeline (vLLM's order); the caller's logits are never modified:
//   1. repetition penalty (HF): for each distinct token in history, logit > 0 is
//      divided by the penalty, logit < 0 multiplied;
//   2. frequency / presence (OpenAI): logit -= count * frequency + (count > 0) * presence;
//   3. temperature (greedy: argmax here, ties -> lowest id; the RNG is not used);
//   4. top-k, 5. top-p (smallest set, by descending probability, whose mass >= top_p of
//      the top-k renormalised mass; at least one token), 6. min-p (drop p < min_p * p_max),
//   7. renormalise and draw with one Rng::uniform().
// Ties in logit go to the lower id. A token more than 87 * T below the best logit
// (probability < 1.6e-38 of the best) counts as probability 0.
// `history` is what the penalties count: the caller decides whether it holds only the
// generated tokens (OpenAI) or prompt + generated (HF repetition penalty). When a penalty
// is on, every id in it must be in [0, vocab_size) (else mx::Error). NaN logits are
// treated as -inf; if no token has a logit above -inf, sample()/probs() throw mx::Error.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params, int64_t vocab_size);

  int32_t sample(const float* logits, std::span<const int32_t> history = {});

  // Writes the exact distribution sample() draws from (vocab_size floats, zeros for
  // filtered tokens; one-hot for greedy). Does not advance the RNG.
  void probs(const float* logits, std::span<const int32_t> history, float* out);

  const SamplingParams& params() const { return params_; }
  int64_t vocab_size() const { return vocab_; }
  void reseed(uint64_t seed) { rng_.reseed(seed); }
  Rng& rng() { return rng_; }  // e.g. for rejection-sampling uniforms

 private:
  struct Cand {
    float z;      // penalised logit (the sort key, with the id as tie-break)
    float e;      // exp((z - max) / T), in (0, 1]
    int32_t id;
  };

  const float* apply_penalties(const float* logits, std::span<const int32_t> history);
  int32_t greedy_pick(const float* z) const;
  void build(const float* z);  // fills e_, then either dense_ + blocks_ or cand_[0, n_)

  SamplingParams params_;
  int64_t vocab_;
  bool greedy_;
  bool penalize_;
  Rng rng_;
  std::vector<float> work_;      // penalised logits
  std::vector<int32_t> counts_;  // token counts, all zero between calls
  std::vector<float> e_;         // exp((z - max) / T) per token, 0 for -inf / NaN
  std::vector<double> blocks_;   // dense mode: sums of e_ over blocks of 256 tokens
  std::vector<Cand> cand_;       // filtered mode: the final set is cand_[0, n_)
  std::vector<float> probe_;     // large top-k: a strided sample of logits
  bool dense_ = false;           // no filter active: draw from e_ directly
  size_t n_ = 0;
  double mass_ = 0;              // total weight of the final set
};

}  // namespace mx
