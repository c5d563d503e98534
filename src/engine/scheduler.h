#pragma once
// The scheduler decides each engine step: which requests run, how many tokens
// each computes, and which drafts are verified, as vLLM v1's Scheduler.schedule
// and sglang's get_next_batch_to_run do. It owns the request queues (submitted,
// waiting, running), admission and cancellation, and the KV: reservation in the
// paged pool, the prefix-cache match at admission, eviction and preemption
// when the pool runs out. Its result is a StepPlan; the model runner executes
// it (engine/model_runner.h) and the output stage reads its rows
// (engine/output_processor.h), which ends finished requests through finish().
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/finish_reason.h"
#include "engine/options.h"
#include "engine/prefix_cache.h"
#include "engine/request.h"
#include "models/model.h"

namespace mx {

// One request's part of a step.
struct ScheduledSeq {
  Request* r = nullptr;  // null once it finished during the step
  int start = 0;         // its first position computed this step (r->computed when scheduled)
  int n = 0;             // its tokens in the batch: a prefill chunk, one decode token, or 1 + drafts
  int token_row = 0;     // its first row in batch.tokens, and in the runner's hidden states
  int drafts = 0;        // drafts verified (its logits rows: drafts + 1)
  int sample_row = -1;   // first logits row to sample or verify from; -1: a prefill chunk before the last
  // Prompt positions start, start + 1, .. scored for prompt_logprobs (each row
  // predicts the prompt token after it), from logits row score_row on.
  int scored = 0, score_row = 0;
};

// A step: one forward's batch and, in batch order, each request's rows in it.
struct StepPlan {
  Batch batch;
  std::vector<ScheduledSeq> seqs;
  void clear() {
    batch.clear();
    seqs.clear();
  }
};

// Counters of one step for EngineMetrics.
struct StepCounts {
  uint64_t steps = 0, computed_prompt = 0, generated = 0;
  uint64_t spec_rounds = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
};

class Scheduler {
 public:
  Scheduler(const EngineOptions& opts, KVPool& pool, PrefixCache& cache);

  // Thread-safe. Queues r and returns its id; throws QueueFull when max_queue
  // requests are waiting.
  uint64_t add(std::unique_ptr<Request> r);
  void cancel(uint64_t id);  // ends the request with FinishReason::Abort at the next admit()
  EngineMetrics metrics() const;
  // Waits until work arrives, stop is set, or the timeout passes (Engine::start's loop).
  void wait_for_work(const std::atomic<bool>& stop, int timeout_ms);
  void wake();  // ends a wait_for_work early (Engine::stop)
  bool idle() const;  // nothing submitted, waiting or running

  // Engine thread. Moves submitted requests in, ends cancelled ones, and
  // admits waiting ones (matching their prompts in the prefix cache) up to max_running.
  void admit();
  bool has_running() const { return !running_.empty(); }
  bool has_waiting() const { return !waiting_.empty(); }
  // Packs the step under step_tokens: decodes first (one token each, plus its
  // draft when the pool has free blocks for it), then prefill chunks, in
  // admission order, reserving KV (evicting, then preempting, as needed).
  // False when nothing fits.
  bool schedule(StepPlan& plan);
  // Ends a running request: its KV goes to the prefix cache and back to the
  // pool, and its final event says why (error: what failed, for
  // FinishReason::Error). False if r is no longer running (ended already).
  bool finish(Request* r, FinishReason reason, const std::string& error = {});
  // Adds a step's counters and samples the queue and KV gauges.
  void publish(const StepCounts& counts);
  void abort_running();  // ends every running request with FinishReason::Abort (engine shutdown)

 private:
  void end(Request& r, FinishReason reason, const std::string& error);
  void free_kv(Request& r);
  bool reserve_or_preempt(Request& r, int n_tokens, const StepPlan& plan);

  EngineOptions opts_;
  KVPool& pool_;
  PrefixCache& cache_;

  mutable std::mutex mu_;  // guards incoming_, cancelled_, next_id_, metrics_
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Request>> incoming_;
  std::vector<uint64_t> cancelled_;
  uint64_t next_id_ = 1;
  EngineMetrics metrics_;

  // Engine-thread state.
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> running_;
};

}  // namespace mx
