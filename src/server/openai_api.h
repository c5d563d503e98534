#pragma once
// The OpenAI API surface: request bodies -> validated engine work, and the
// JSON shapes of responses and errors (https://platform.openai.com/docs/api-reference).
//
// Supported request fields
//   /v1/completions: model, prompt (string | [string] | [int] | [[int]]: one
//     choice per prompt), max_tokens (default 16), stream, stream_options
//     {include_usage}, stop, logprobs (N <= 5: the sampled tokens' logprobs and N top alternatives),
//     n, best_of (1 only), echo (the prompt's text before the completion's;
//     with logprobs, the prompt tokens' logprobs too, the first null, as OpenAI's
//     legacy API and vLLM; max_tokens 0 with echo scores the prompt alone), seed, temperature,
//     top_p, presence_penalty, frequency_penalty, user (ignored);
//   /v1/chat/completions: model, messages (see chat_prompt.h), max_tokens /
//     max_completion_tokens (default: the rest of the context), stream,
//     stream_options, stop, logprobs (bool), top_logprobs (0..20), n,
//     seed, temperature, top_p, presence_penalty, frequency_penalty, user;
//   vLLM-style extensions on both: top_k (0 or -1 = off), min_p,
//     repetition_penalty, ignore_eos, stop_token_ids;
//   response_format on both: text, json_object, json_schema (structured
//     outputs by constrained decoding: server/structured_output.h); regex on
//     both (sglang's spelling, vLLM's guided_regex): the whole output matches
//     the regular expression (grammar/regex.h);
//   chat tools (function tools: name, description, parameters), tool_choice
//     (none | auto | required | {"type": "function", "function": {"name"}}),
//     parallel_tool_calls (server/tool_calls.h): the tools go to the chat
//     template (or, for a template that never reads `tools`, into a system
//     message describing them and the family's call format); the answer's calls
//     come back as message.tool_calls (finish_reason "tool_calls"). "required"
//     and a named function constrain decoding to calls whose arguments fit the
//     parameter schemas; "none" leaves the tools out of the prompt. Assistant
//     messages with tool_calls and "tool" messages are passed to the template,
//     with each call's arguments as the object the template expects (a JSON
//     string for DeepSeek's, which concatenates them).
// Fields that would change the result and are not implemented (best_of > 1,
// suffix, logit_bias) are a 400 naming the field; unknown fields are ignored.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <memory>
#include <string>
#include <vector>

#include "sampling/sampling.h"
#include "grammar/token_mask.h"
#include "chat/chat_template.h"
#include "server/structured_output.h"
#include "server/tool_calls.h"

namespace mx {
class Tokenizer;
}

namespace mx::server {

// An error answered to the client: HTTP status plus OpenAI's error object.
struct ApiError : std::runtime_error {
  int status;
  std::string type, param, code;
  ApiError(int status, const std::string& message, std::string param = {}, std::string code = {},
           std::string type = "invalid_request_error");
};

// {"error": {"message", "type", "param", "code"}}; empty param / code are null.
nlohmann::json error_body(const std::string& message, const std::string& type, const std::string& param = {},
                          const std::string& code = {});
nlohmann::json error_body(const ApiError& e);

enum class ApiKind { Completion, Chat };

// Bounds on what one request may ask for (each a 400 naming the field when exceeded).
struct ApiLimits {
  int max_tokens = 0;          // largest max_tokens / max_completion_tokens (0: the context); defaults are cut to it
  int max_prompt_tokens = 0;   // longest prompt in tokens (0: the context less one)
  int max_prompts = 64;        // prompts (choices) in one /v1/completions request
  int max_stop = 4;            // stop strings (OpenAI's limit)
  int max_stop_bytes = 1024;   // bytes of one stop string
  int max_stop_token_ids = 256;
};

struct ApiContext {
  const Tokenizer* tokenizer = nullptr;  // null: token-id prompts only
  std::string served_model_name;
  int context_length = 0;  // the model's max positions
  int vocab_size = 0;      // the model's vocabulary (0: unknown); token ids past it are refused
  std::string model_dir;   // passed to render_chat (ChatTemplateOptions::model_dir)
  // The model's chat template, loaded once when the server starts (null: none;
  // render_chat's fallback format then).
  std::shared_ptr<const ModelChatTemplate> chat_template;
  // The most text bytes one token stands for (the longest piece, specials
  // included): a text prompt of B bytes is at least B / (2 * this) tokens, so
  // one that cannot fit is refused before it is tokenized (0: unknown).
  size_t max_token_bytes = 0;
  // response_format json_object / json_schema (null: refused with a 400).
  StructuredOutputs* structured = nullptr;
  // The chat template thinks ("</think>"): split reasoning_content off chat answers (server/reasoning.h).
  bool reasoning = false;
  // The format the chat template writes tool calls in (None: requests with tools are refused).
  ToolFormat tool_format = ToolFormat::None;
  int kv_capacity = 0;     // tokens one sequence can hold in the KV cache (0: unknown); defaults are cut to it
  ApiLimits limits;
};

struct ApiRequest {
  ApiKind kind = ApiKind::Completion;
  std::string model;
  std::vector<std::vector<int32_t>> prompts;  // one engine request (choice) each: each prompt n times
  int n = 1;                                  // choices per prompt (choice i: prompt i / n, seed + i % n)
  std::vector<int> max_tokens;                // per prompt, >= 1 unless the prompt fills the context
  SamplingParams sampling;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool stream = false, include_usage = false;
  bool logprobs = false;
  int top_logprobs = 0;
  bool echo = false;         // completions: the prompt comes back before the completion
  bool prompt_only = false;  // echo with max_tokens 0: one token is generated and dropped  // alternatives per token (chat top_logprobs, completions logprobs N)
  // Stream one event per generated token (its token_ids, with whatever text became
  // safe to send), rather than only when text is complete: for token-id prompts
  // and for requests with "return_token_ids": true, so token timing can be measured
  // whatever the tokens' text (a token may decode to nothing or half a character).
  bool token_events = false;
  // response_format's grammar (null: free text); each choice gets its own matcher.
  std::shared_ptr<grammar::GrammarMasks> response_format;
  // Chat tools with tool_choice other than "none": parse the answers' calls (null: no tools).
  std::shared_ptr<const ToolRequest> tools;
  bool reasoning = false;       // split reasoning_content off the answer ...
  bool reasoning_open = false;  // ... which starts inside "<think>" (the prompt opened it)
};

// Both throw ApiError (400 bad field or a limit of ctx.limits exceeded, 404 unknown model).
ApiRequest parse_completion_request(const nlohmann::json& body, const ApiContext& ctx);
// ordered: the same body with its members in order (tools' schemas keep their
// property order); null: taken from body (sorted).
ApiRequest parse_chat_request(const nlohmann::json& body, const ApiContext& ctx,
                              const nlohmann::ordered_json* ordered = nullptr);

// Parses a request body; 400 ApiError for invalid JSON or a non-object.
nlohmann::json parse_body(const std::string& body);

// A request body as the HTTP server receives it -> the validated request: the
// whole of the server's input validation, without a model (fuzz/openai_request.cpp).
// Throws ApiError only (the tokenizer's or template's mx::Error become a 400).
ApiRequest parse_request(ApiKind kind, const std::string& body, const ApiContext& ctx);

// "cmpl-" / "chatcmpl-" + 24 random hex digits.
std::string make_id(const std::string& prefix);

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);

// Serializes for the wire; invalid UTF-8 (never expected) becomes U+FFFD rather than throwing.
std::string dump(const nlohmann::json& j);

}  // namespace mx::server
