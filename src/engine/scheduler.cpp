#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>

namespace mx {

Scheduler::Scheduler(const EngineOptions& opts, KVPool& pool, PrefixCache& cache)
    : opts_(opts), pool_(pool), cache_(cache) {
  metrics_.kv_blocks_total = pool_.n_blocks();
}

void Scheduler::abort_running() {
  for (auto& r : running_) end(*r, FinishReason::Abort, {});
  running_.clear();
}

uint64_t Scheduler::add(std::unique_ptr<Request> r) {
  std::lock_guard<std::mutex> lk(mu_);
  if (int(incoming_.size()) + metrics_.waiting >= opts_.max_queue + opts_.max_running)
    throw QueueFull(fmt::format("the request queue is full ({} waiting)", incoming_.size() + metrics_.waiting));
  r->id = next_id_++;
  const uint64_t id = r->id;
  incoming_.push_back(std::move(r));
  cv_.notify_one();
  return id;
}

void Scheduler::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  cancelled_.push_back(id);
  cv_.notify_one();
}

EngineMetrics Scheduler::metrics() const {
  std::lock_guard<std::mutex> lk(mu_);
  EngineMetrics m = metrics_;
  m.waiting += int(incoming_.size());
  return m;
}

void Scheduler::wait_for_work(const std::atomic<bool>& stop, int timeout_ms) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms),
               [&] { return stop || !incoming_.empty() || !cancelled_.empty(); });
}

void Scheduler::wake() { cv_.notify_all(); }

bool Scheduler::idle() const {
  std::lock_guard<std::mutex> lk(mu_);
  return incoming_.empty() && waiting_.empty() && running_.empty();
}

// Its computed KV stays findable in the prefix cache; the blocks go back to the
// pool once nothing else holds them.
void Scheduler::free_kv(Request& r) {
  if (opts_.prefix_cache && r.computed > 0) cache_.insert(r.tokens.data(), r.computed, r.kv.blocks);
  r.kv.release(pool_);
  r.computed = 0;
  if (r.spec) r.spec->clear();
}

void Scheduler::end(Request& r, FinishReason reason, const std::string& error) {
  free_kv(r);
  TokenEvent ev;
  ev.finished = true;
  ev.finish_reason = reason;
  ev.error = error;
  ev.prompt_tokens = r.n_prompt;
  ev.cached_tokens = r.cached;
  ev.completion_tokens = int(r.generated.size());
  if (r.cb) r.cb(ev);
  std::lock_guard<std::mutex> lk(mu_);
  ++metrics_.requests_finished;
}

bool Scheduler::finish(Request* r, FinishReason reason, const std::string& error) {
  auto it = std::find_if(running_.begin(), running_.end(), [r](auto& p) { return p.get() == r; });
  if (it == running_.end()) return false;
  end(**it, reason, error);
  running_.erase(it);
  return true;
}

void Scheduler::admit() {
  std::vector<uint64_t> cancelled;
  {
    std::lock_guard<std::mutex> lk(mu_);
    while (!incoming_.empty()) {
      waiting_.push_back(std::move(incoming_.front()));
      incoming_.pop_front();
    }
    cancelled.swap(cancelled_);
  }
  auto is_cancelled = [&](const auto& r) {
    return std::find(cancelled.begin(), cancelled.end(), r->id) != cancelled.end();
  };
  auto abort_cancelled = [&](auto& queue) {
    for (auto it = queue.begin(); it != queue.end();)
      if (is_cancelled(*it)) {
        end(**it, FinishReason::Abort, {});
        it = queue.erase(it);
      } else {
        ++it;
      }
  };
  abort_cancelled(waiting_);
  abort_cancelled(running_);
  while (int(running_.size()) < opts_.max_running && !waiting_.empty()) {
    auto r = std::move(waiting_.front());
    waiting_.pop_front();
    // A prompt to score is computed in full, once.
    if (opts_.prefix_cache && (r->req.prompt_logprobs < 0 || r->prompt_scored)) {
      // Keep at least the last token to compute: its logits give the next token.
      const int matched = cache_.match(r->tokens.data(), int(r->tokens.size()), int(r->tokens.size()) - 1,
                                       r->kv.blocks);
      r->kv.n_tokens = r->computed = matched;
      if (!r->admitted) r->cached = std::min(matched, r->n_prompt);
    }
    if (!r->admitted) {
      std::lock_guard<std::mutex> lk(mu_);
      metrics_.prompt_tokens += r->n_prompt;
      metrics_.cached_prompt_tokens += r->cached;
    }
    r->admitted = true;
    running_.push_back(std::move(r));
  }
}

// Grows r's KV to n positions, evicting cached blocks and then preempting the
// newest requests not yet in this step's plan as needed. False if r itself
// had to be preempted.
bool Scheduler::reserve_or_preempt(Request& r, int n, const StepPlan& plan) {
  auto planned = [&](const Request* q) {
    return std::any_of(plan.seqs.begin(), plan.seqs.end(), [q](const ScheduledSeq& s) { return s.r == q; });
  };
  for (;;) {
    if (r.kv.reserve(pool_, n)) return true;
    const int need = (n + pool_.block_size() - 1) / pool_.block_size() - int(r.kv.blocks.size());
    if (cache_.evict(need - pool_.free_blocks()) > 0) continue;
    // Preempt the most recently admitted request outside the plan (possibly r
    // itself): it loses its KV and will be recomputed from its tokens so far.
    auto victim = running_.end() - 1;
    while (victim->get() != &r && planned(victim->get())) --victim;
    free_kv(**victim);
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++metrics_.preemptions;
    }
    const bool self = victim->get() == &r;
    waiting_.push_front(std::move(*victim));
    running_.erase(victim);
    if (self) return false;
  }
}

bool Scheduler::schedule(StepPlan& plan) {
  plan.clear();  // the plan's vectors keep their capacity: a decode step does not allocate
  Batch& b = plan.batch;
  int budget = opts_.step_tokens, rows = 0;
  // Decodes first (one token each, plus its draft), then prefill chunks, in admission order.
  for (int pass = 0; pass < 2 && budget > 0; ++pass) {
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
      Request* r = running_[i].get();
      const int pending = r->pending();
      if (pending <= 0 || (pass == 0) != (pending == 1)) continue;
      int k = pending == 1 && r->spec ? std::min(r->spec->size(), budget - 1) : 0;
      // Drafts only take free blocks: never evict cached prefixes or preempt for them.
      if (k > 0 && !r->kv.reserve(pool_, r->computed + 1 + k)) k = 0;
      const int n = k > 0 ? 1 + k : std::min(pending, budget);
      if (!reserve_or_preempt(*r, r->computed + n, plan)) break;  // r itself was preempted: it waits
      ScheduledSeq s;
      s.r = r;
      s.start = r->computed;
      s.n = n;
      s.token_row = int(b.tokens.size());
      if (k > 0) {
        b.add(&r->kv, r->spec->verify_input(r->tokens.back(), k).data(), n, r->computed, false);
        for (int j = 0; j < n; ++j) b.logit_rows.push_back(s.token_row + j);
        s.drafts = k;
        s.sample_row = rows;
        rows += n;
      } else {
        // A prefill chunk: the last one gives the sampling row; a prompt being
        // scored (prompt_logprobs) also a row, first, per position whose next token is a prompt token.
        const bool last = r->computed + n == int(r->tokens.size());
        s.scored = r->req.prompt_logprobs >= 0 && !r->prompt_scored
                       ? std::max(0, std::min(r->computed + n, r->n_prompt - 1) - r->computed)
                       : 0;
        s.score_row = rows;
        b.add(&r->kv, r->tokens.data() + r->computed, n, r->computed, false);
        for (int j = 0; j < s.scored; ++j) b.logit_rows.push_back(s.token_row + j);
        rows += s.scored;
        if (last) {
          b.logit_rows.push_back(s.token_row + n - 1);
          s.sample_row = rows++;
        }
      }
      plan.seqs.push_back(s);
      budget -= n;
    }
  }
  return !b.tokens.empty();
}

void Scheduler::publish(const StepCounts& c) {
  std::lock_guard<std::mutex> lk(mu_);
  metrics_.steps += c.steps;
  metrics_.computed_prompt_tokens += c.computed_prompt;
  metrics_.generated_tokens += c.generated;
  metrics_.spec_rounds += c.spec_rounds;
  metrics_.spec_draft_tokens += c.spec_draft_tokens;
  metrics_.spec_accepted_tokens += c.spec_accepted_tokens;
  metrics_.running = int(running_.size());
  metrics_.waiting = int(waiting_.size());
  metrics_.kv_blocks_free = pool_.free_blocks();
  metrics_.kv_blocks_cached = cache_.cached_blocks();
}

}  // namespace mx
