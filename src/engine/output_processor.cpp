#include "engine/output_processor.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <optional>

namespace mx {

namespace {
bool all_finite(const float* v, size_t n) {  // no NaN, no +inf
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i]) && !(std::isinf(v[i]) && v[i] < 0)) return false;  // -inf is a masked logit
  return true;
}
}  // namespace

TokenLogprob token_logprob(const float* lg, int vocab, int32_t tok, int k) {
  double mx = -INFINITY, s = 0;
  for (int v = 0; v < vocab; ++v) mx = std::max(mx, double(lg[v]));
  for (int v = 0; v < vocab; ++v) s += std::exp(double(lg[v]) - mx);
  const double log_z = mx + std::log(s);
  TokenLogprob out;
  out.logprob = float(double(lg[tok]) - log_z);
  k = std::min(k, vocab);
  if (k > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    for (int v = 0; v < vocab; ++v) ids[size_t(v)] = v;
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [&](int32_t a, int32_t b) { return lg[a] > lg[b] || (lg[a] == lg[b] && a < b); });
    for (int i = 0; i < k; ++i) out.top.push_back({ids[size_t(i)], float(double(lg[ids[size_t(i)]]) - log_z)});
  }
  return out;
}

OutputProcessor::OutputProcessor(const EngineOptions& opts, const ModelConfig& config, KVPool& pool,
                                 PrefixCache& cache, Scheduler& scheduler, Drafter* drafter)
    : opts_(opts), config_(config), pool_(pool), cache_(cache), scheduler_(scheduler), drafter_(drafter) {}

void OutputProcessor::process(StepPlan& plan, ModelRunner& runner) {
  const int V = config_.vocab_size;
  StepCounts counts;
  counts.steps = 1;
  for (const ScheduledSeq& s : plan.seqs) {
    Request* r = s.r;
    if (s.drafts > 0) continue;  // verifying drafts: advanced below, by what was accepted
    if (r->computed < r->n_prompt) counts.computed_prompt += std::min(r->n_prompt, r->computed + s.n) - r->computed;
    r->computed += s.n;
    if (opts_.prefix_cache && !r->prompt_cached && r->computed >= r->n_prompt) {
      cache_.insert(r->tokens.data(), r->n_prompt, r->kv.blocks);  // share the prompt while it decodes
      r->prompt_cached = true;
    }
  }
  for (const ScheduledSeq& s : plan.seqs) {
    if (s.scored == 0) continue;
    Request* r = s.r;
    r->prompt_lp.resize(size_t(r->n_prompt - 1));
    for (int j = 0; j < s.scored; ++j) {
      const int pos = s.start + j;
      r->prompt_lp[size_t(pos)] =
          token_logprob(runner.logits(s.score_row + j), V, r->tokens[size_t(pos) + 1], r->req.prompt_logprobs);
    }
  }
  for (const ScheduledSeq& s : plan.seqs) {
    if (s.sample_row < 0) continue;
    Request* r = s.r;
    float* lg = runner.logits(s.sample_row);
    TokenConstraint* constraint = r->req.constraint.get();
    if (!all_finite(lg, size_t(s.drafts + 1) * V)) {
      // A NaN in the weights or activations (e.g. one poisoned embedding row):
      // this request fails with an error, the server goes on.
      done_.push_back({r, FinishReason::Error, "the model's logits for this request are NaN or infinite"});
      continue;
    }
    if (s.drafts == 0) {
      try {
        if (constraint) constraint->mask(lg, V);
        emit_token(*r, r->sampler->sample(lg, r->generated), lg);
      } catch (const std::exception& e) {
        done_.push_back({r, FinishReason::Error, e.what()});
        continue;
      }
      ++counts.generated;
      continue;
    }
    int emitted = 0, a = 0;
    try {
      a = verify_drafts(
          *r->sampler, lg, *r->spec, s.drafts, r->generated,
          [&](int32_t tok, int row) {
            ++emitted;
            return emit_token(*r, tok, lg + size_t(row) * V);
          },
          verify_scratch_,
          // Each row is masked in the state after the tokens emitted before it.
          constraint ? PrepareRow([&](int row) { constraint->mask(lg + size_t(row) * V, V); }) : PrepareRow());
    } catch (const std::exception& e) {
      done_.push_back({r, FinishReason::Error, e.what()});
      continue;
    }
    // Positions computed..computed+a hold the last token and the accepted
    // drafts; the rejected drafts' KV is dropped.
    r->computed += 1 + std::min(a, emitted);
    r->kv.truncate(pool_, r->computed);
    counts.generated += emitted;
    ++counts.spec_rounds;
    counts.spec_draft_tokens += s.drafts;
    counts.spec_accepted_tokens += a;
    drafter_->on_verified(*r->spec, s.drafts, a);
  }
  finish_done(plan);
  if (drafter_) {
    try {
      draft_next(plan, runner.hidden());
    } catch (const std::exception& e) {
      fail(plan, std::string("drafting failed: ") + e.what());
    }
  }
  scheduler_.publish(counts);
}

void OutputProcessor::fail(StepPlan& plan, const std::string& error) {
  for (const ScheduledSeq& s : plan.seqs)
    if (s.r) done_.push_back({s.r, FinishReason::Error, error});
  finish_done(plan);
}

bool OutputProcessor::emit_token(Request& r, int32_t tok, const float* lg) {
  TokenEvent ev;
  ev.token = tok;
  if (r.req.logprobs > 0) {
    TokenLogprob lp = token_logprob(lg, config_.vocab_size, tok, r.req.top_logprobs);
    ev.logprob = lp.logprob;
    ev.top = std::move(lp.top);
  }
  if (r.req.prompt_logprobs >= 0 && !r.prompt_scored) {
    ev.prompt_logprobs = std::move(r.prompt_lp);
    r.prompt_scored = true;
  }
  r.tokens.push_back(tok);
  r.generated.push_back(tok);
  std::optional<FinishReason> reason;
  const auto& eos_ids = config_.eos_token_ids;
  const bool eos = std::find(eos_ids.begin(), eos_ids.end(), tok) != eos_ids.end();
  if ((eos && !r.req.ignore_eos) ||
      std::find(r.req.stop_ids.begin(), r.req.stop_ids.end(), tok) != r.req.stop_ids.end())
    reason = FinishReason::Stop;
  else if (r.req.constraint && (r.req.constraint->accept(tok), r.req.constraint->finished()))
    reason = FinishReason::Stop;  // the structured output is complete
  else if (int(r.generated.size()) >= r.req.max_tokens || int(r.tokens.size()) >= config_.max_position_embeddings)
    reason = FinishReason::Length;
  ev.prompt_tokens = r.n_prompt;
  ev.cached_tokens = r.cached;
  ev.completion_tokens = int(r.generated.size());
  if (!reason) {
    if (r.cb) r.cb(ev);
    return true;
  }
  done_.push_back({&r, *reason, {}});
  if (r.cb) {
    ev.finished = true;
    ev.finish_reason = *reason;
    r.cb(ev);
    r.cb = nullptr;  // Scheduler::finish must not send a second final event
  }
  return false;
}

void OutputProcessor::finish_done(StepPlan& plan) {
  for (const auto& [r, reason, error] : done_) {
    if (!scheduler_.finish(r, reason, error)) continue;  // listed twice
    for (ScheduledSeq& s : plan.seqs)
      if (s.r == r) s.r = nullptr;
  }
  done_.clear();
}

// Every sequence that advanced this step (finished ones are gone from the
// plan) gets its next draft; the drafter also sees prefill chunks (the MTP
// layer's KV).
void OutputProcessor::draft_next(const StepPlan& plan, const float* hidden) {
  spec_seqs_.clear();
  for (const ScheduledSeq& p : plan.seqs) {
    Request* r = p.r;
    if (!r) continue;
    SpecSeq s;
    s.tokens = &r->tokens;
    s.kv = &r->kv;
    s.start = p.start;
    s.n = r->computed - p.start;
    s.hidden_row = p.token_row;
    if (r->pending() == 1) {
      // No draft past max_tokens (one more token always comes with the
      // verification) or past the context.
      const int left = r->req.max_tokens - int(r->generated.size()) - 1;
      const int room = config_.max_position_embeddings - int(r->tokens.size());
      s.limit = std::max(0, std::min(left, room));
    }
    s.state = r->spec.get();
    spec_seqs_.push_back(s);
  }
  drafter_->propose(spec_seqs_, hidden);
}

}  // namespace mx
