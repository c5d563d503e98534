#pragma once
// A generation request on its way through the engine: what a caller submits
// (GenerationRequest), what it gets back (TokenEvent, once per token), why
// submit refuses one (QueueFull, ContextTooLong), and the engine's own state of
// it (Request), which the scheduler, the model runner and the output stage
// share, as vLLM v1's Request and sglang's Req are shared by their stages.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "engine/finish_reason.h"
#include "models/kv_cache.h"
#include "sampling/sampling.h"
#include "sampling/token_constraint.h"
#include "spec/draft_state.h"

namespace mx {

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

// submit()'s refusals, as types the server maps to its error codes (Engine names
// them Engine::QueueFull and Engine::ContextTooLong).
struct QueueFull : Error {  // max_queue requests are waiting: HTTP 429
  using Error::Error;
};
struct ContextTooLong : Error {  // the OpenAI API's context_length_exceeded (a 400)
  using Error::Error;
};

// The engine's state of one request; after submit, only the engine thread touches it.
struct Request {
  uint64_t id = 0;
  GenerationRequest req;
  TokenCallback cb;             // null once the final event was sent
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int n_prompt = 0;
  int computed = 0;             // positions whose KV is in kv
  int cached = 0;               // prompt tokens served by the prefix cache at first admission
  bool admitted = false, prompt_cached = false;
  SeqKV kv;
  std::unique_ptr<Sampler> sampler;
  std::vector<int32_t> generated;
  // Speculative decoding (null without a drafter): made and read by the
  // Drafter and verify_drafts, opaque to the engine.
  std::unique_ptr<DraftState> spec;
  std::vector<TokenLogprob> prompt_lp;  // prompt_logprobs: position p + 1's, at p
  bool prompt_scored = false;           // ... sent with the first token

  int pending() const { return int(tokens.size()) - computed; }  // tokens whose KV is not computed yet
};

}  // namespace mx
