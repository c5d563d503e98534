#include "spec/drafter.h"

#include <algorithm>

#include "core/error.h"
#include "models/model.h"
#include "spec/mtp_drafter.h"
#include "spec/ngram.h"

namespace mx {

SpecMode parse_spec_mode(const std::string& s) {
  if (s == "off") return SpecMode::off;
  if (s == "ngram") return SpecMode::ngram;
  if (s == "mtp") return SpecMode::mtp;
  fail("unknown speculative mode '{}' (expected off, ngram or mtp)", s);
}

const char* spec_mode_name(SpecMode m) {
  switch (m) {
    case SpecMode::ngram: return "ngram";
    case SpecMode::mtp: return "mtp";
    default: return "off";
  }
}

void SpecOptions::validate() const {
  MX_CHECK(steps >= 1 && steps <= 16, "--spec-steps must be in [1, 16], got {}", steps);
  MX_CHECK(ngram_min >= 1 && ngram_max >= ngram_min && ngram_max <= 64,
           "n-gram lookup sizes must satisfy 1 <= min <= max <= 64, got min {} max {}", ngram_min, ngram_max);
}

std::span<const int32_t> DraftState::verify_input(int32_t last, int k) {
  verify_input_.assign(1, last);
  verify_input_.insert(verify_input_.end(), draft_.begin(), draft_.begin() + k);
  return verify_input_;
}

void DraftState::clear() {
  draft_.clear();
  q_.clear();
}

std::unique_ptr<DraftState> Drafter::start(const SamplingParams& sampling) const {
  auto s = std::make_unique<DraftState>();
  s->k_ = opts_.steps;
  if (!sampling.greedy()) {
    // Drafts draw from their own stream so the target's RNG stays the request's
    // (a sampled request's output then does not depend on how much was drafted).
    SamplingParams dp = sampling;
    dp.seed ^= 0x9e3779b97f4a7c15ull;
    s->sampler_ = std::make_unique<Sampler>(dp, vocab_);
  }
  return s;
}

void Drafter::on_verified(DraftState& s, int drafted, int accepted) const {
  // A fully accepted draft asks for one more next time (up to --spec-steps); a
  // rejection asks for what was accepted (at least one), so a sequence that the
  // drafter predicts badly stops paying for long drafts the target rejects.
  if (opts_.adaptive) s.k_ = accepted == drafted ? std::min(opts_.steps, s.k_ + 1) : std::max(1, accepted);
}

void Drafter::propose(std::span<SpecSeq> seqs, const float* hidden) {
  for (SpecSeq& s : seqs) {
    s.want = std::min(s.limit, s.state->k_);
    s.draft_sampler = s.state->sampler_.get();
    s.draft = &s.state->draft_;
    s.q = &s.state->q_;
  }
  draft_tokens(seqs, hidden);
}

std::unique_ptr<Drafter> make_drafter(const SpecOptions& o, Model& model, KVPool& pool) {
  o.validate();
  switch (o.mode) {
    case SpecMode::ngram: return std::make_unique<NgramDrafter>(o, model.config().vocab_size);
    case SpecMode::mtp: return std::make_unique<MtpDrafter>(o, model, pool);
    default: return nullptr;
  }
}

}  // namespace mx
