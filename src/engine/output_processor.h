#pragma once
// The output stage turns a step's logits into tokens and ends what is done, as
// vLLM v1's Scheduler.update_from_output (with the sampler and the rejection
// sampler before it) and sglang's process_batch_result do. For each request of
// the plan, in batch order: it advances `computed` past what the forward wrote
// (sharing a finished prompt through the prefix cache), scores prompt rows
// (prompt_logprobs), checks its logits rows are finite, applies its
// TokenConstraint, then samples one token or verifies its drafts
// (verify_drafts), sending one TokenEvent per token and deciding the
// FinishReason. Finished requests end through Scheduler::finish; the others
// get their next drafts from the Drafter; the step's counters go to the
// scheduler's metrics. A failure in one request (NaN logits, a sampler or
// constraint error) ends only that request, with FinishReason::Error.
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "engine/options.h"
#include "engine/prefix_cache.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "spec/drafter.h"
#include "spec/verify.h"

namespace mx {

class OutputProcessor {
 public:
  // drafter: null without speculative decoding.
  OutputProcessor(const EngineOptions& opts, const ModelConfig& config, KVPool& pool, PrefixCache& cache,
                  Scheduler& scheduler, Drafter* drafter);
  // After a forward that ran: the whole stage.
  void process(StepPlan& plan, ModelRunner& runner);
  // After a forward that failed: every request of the step ends with FinishReason::Error.
  void fail(StepPlan& plan, const std::string& error);

 private:
  // Appends token tok (sampled from logits lg) to r and sends its event; false
  // once r has finished (then it is queued in done_).
  bool emit_token(Request& r, int32_t tok, const float* lg);
  // Ends the requests in done_ and clears their entries in the plan.
  void finish_done(StepPlan& plan);
  // Asks the drafter for the next drafts of every request still in the plan.
  void draft_next(const StepPlan& plan, const float* hidden);

  EngineOptions opts_;
  const ModelConfig& config_;
  KVPool& pool_;
  PrefixCache& cache_;
  Scheduler& scheduler_;
  Drafter* drafter_;

  struct Done {
    Request* r;
    FinishReason reason;
    std::string error;  // FinishReason::Error: what failed
  };
  std::vector<Done> done_;  // finished this step
  std::vector<SpecSeq> spec_seqs_;
  VerifyScratch verify_scratch_;
};

}  // namespace mx
