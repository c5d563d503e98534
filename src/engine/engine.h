#pragma once
// The serving engine: continuous batching over one model. Each step packs the
// running requests' decode tokens and chunks of pending prefills into one
// forward, under a per-step token budget. KV is paged; full blocks of every
// prompt are shared through the radix prefix cache; when the pool runs out,
// unreferenced cached blocks are evicted (LRU) and then the newest request is
// preempted and later recomputed from scratch.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/finish_reason.h"
#include "engine/kv_cache.h"
#include "engine/prefix_cache.h"
#include "sampling/sampling.h"
#include "sampling/token_constraint.h"
#include "models/model.h"
#include "spec/drafter.h"
#include "spec/verify.h"

namespace mx {

struct EngineOptions {
  int kv_blocks = 0;          // 0: enough for max_running full-context sequences, capped at 1 GiB of KV
  int block_size = 16;
  std::string kv_dtype = "auto";  // --kv-dtype (engine/kv_cache.h kv_cache_dtype)
  int max_running = 16;       // requests decoding at once
  int max_queue = 256;        // waiting requests beyond which submit() refuses
  int step_tokens = 256;      // token budget of one forward (decodes + prefill chunks)
  bool prefix_cache = true;
  SpecOptions spec;           // speculative decoding (off by default)
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 256;
  std::vector<int32_t> stop_ids;  // in addition to the model's EOS ids
  bool ignore_eos = false;
  int logprobs = 0;               // return the sampled token's logprob when > 0 ...
  int top_logprobs = 0;           // ... and the logprobs of this many most likely tokens
  // Structured output: the tokens allowed next (null: any). Owned by the request.
  std::shared_ptr<TokenConstraint> constraint;
  // >= 0: also score the prompt: each prompt token's logprob (from the second
  // on) with this many most likely alternatives, on the first event. Such a
  // prompt is computed in full (no prefix-cache hit) until it has been scored.
  int prompt_logprobs = -1;
};

// A token's logprob and the most likely tokens at its position, most likely first.
struct TokenLogprob {
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};
// log softmax(logits)[token] and the k largest (ties to the lower id, a stable
// order for tests and clients), in double precision.
TokenLogprob token_logprob(const float* logits, int vocab, int32_t token, int k);

struct TokenEvent {
  int32_t token = -1;      // -1 on a final event without a token
  float logprob = 0;
  // The most likely tokens and their logprobs, most likely first (top_logprobs).
  std::vector<std::pair<int32_t, float>> top;
  bool finished = false;
  FinishReason finish_reason = FinishReason::Stop;  // on the final event
  std::string error;  // FinishReason::Error: what failed (describe() adds "error: ")
  int prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  // GenerationRequest::prompt_logprobs: on the first event, prompt tokens 1.. in order.
  std::vector<TokenLogprob> prompt_logprobs;
};
// Called on the engine thread, in order, once per generated token; the last
// event has finished = true.
using TokenCallback = std::function<void(const TokenEvent&)>;

struct EngineMetrics {
  int waiting = 0, running = 0;
  int kv_blocks_total = 0, kv_blocks_free = 0, kv_blocks_cached = 0;
  uint64_t prompt_tokens = 0, cached_prompt_tokens = 0, computed_prompt_tokens = 0;
  uint64_t generated_tokens = 0, requests_finished = 0, preemptions = 0, steps = 0;
  // Speculative decoding: verification rounds (decode steps of a sequence that
  // carried drafts), draft tokens verified, and how many of them were accepted.
  // Tokens per round = (accepted + rounds) / rounds.
  uint64_t spec_rounds = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
};

class Engine {
 public:
  Engine(std::unique_ptr<Model> model, const EngineOptions& opts);
  ~Engine();  // stops the loop, aborting what is left

  // Thread-safe. Validates the request (throws mx::Error: empty prompt, bad
  // sampling params, token ids out of range; ContextTooLong when prompt +
  // max_tokens exceed the model's context or the KV cache) and returns its id;
  // throws QueueFull when max_queue requests are waiting.
  uint64_t submit(GenerationRequest req, TokenCallback cb);
  void cancel(uint64_t id);  // thread-safe; the request ends with FinishReason::Abort

  // Runs steps until every submitted request has finished (tests, CLI).
  void run_until_idle();
  // Or a background thread that runs steps as work arrives.
  void start();
  void stop();

  EngineMetrics metrics() const;
  const ModelConfig& config() const { return model_->config(); }
  Model& model() { return *model_; }

  struct QueueFull : Error {
    using Error::Error;
  };
  // The OpenAI API's context_length_exceeded (the server's 400 names that code).
  struct ContextTooLong : Error {
    using Error::Error;
  };

 private:
  struct Request;
  bool step();  // one forward; false when there was nothing to do
  // step()'s stages (engine.cpp says what each does).
  bool schedule();
  bool run_forward();
  void process_outputs();
  void admit();
  bool reserve_or_preempt(Request& r, int n_tokens, const std::vector<Request*>& in_batch);
  // Ends r: its final event says why (error: what failed, for FinishReason::Error).
  void finish(Request& r, FinishReason reason, const std::string& error = {});
  void finish_done(std::vector<Request*>& in_batch);
  static bool all_finite(const float* v, size_t n);  // no NaN, no +inf
  void release_kv(Request& r);
  void publish_metrics(uint64_t computed_prompt, uint64_t generated);
  // Appends token tok (sampled from logits lg) to r and sends its event; false
  // once r has finished (then it is queued in done_).
  bool emit_token(Request& r, int32_t tok, const float* lg);
  void draft_next(const std::vector<Request*>& stepped);

  std::unique_ptr<Model> model_;
  EngineOptions opts_;
  std::unique_ptr<KVPool> pool_;
  std::unique_ptr<PrefixCache> cache_;

  mutable std::mutex mu_;  // guards incoming_, cancelled_, metrics_
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Request>> incoming_;
  std::vector<uint64_t> cancelled_;
  uint64_t next_id_ = 1;
  EngineMetrics metrics_;

  // Engine-thread state.
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> running_;
  Batch batch_;
  struct LogitOwner {
    Request* r;
    int first_row;  // its first row in logits_
    int drafts;     // drafts verified in this step (rows = drafts + 1)
  };
  struct PromptRows {  // prompt positions scored this step (GenerationRequest::prompt_logprobs)
    Request* r;
    int first_row, count, first_pos;  // rows first_row.. hold positions first_pos.., predicting the token after
  };
  std::vector<PromptRows> prompt_rows_;
  std::vector<Request*> in_batch_;                      // reused by step()
  std::vector<LogitOwner> logit_owner_;
  struct Done {
    Request* r;
    FinishReason reason;
    std::string error;  // FinishReason::Error: what failed
  };
  std::vector<Done> done_;  // finished this step
  std::vector<float> logits_, hidden_;
  std::unique_ptr<Drafter> drafter_;
  std::vector<SpecSeq> spec_seqs_;
  VerifyScratch verify_scratch_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
};

}  // namespace mx
