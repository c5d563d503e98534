#pragma once
// Why a generation ended, as a closed set: the engine's final TokenEvent and
// generate()'s result carry one, the server writes it as the OpenAI API's
// finish_reason ("stop", "length"; "abort" and "error" are mxserve's own, as
// in vLLM's output, for a cancelled request and one whose step failed).
#include <string>

namespace mx {

enum class FinishReason {
  Stop,    // EOS, a stop token id, a stop string, or a complete structured output
  Length,  // max_tokens or the model's context reached
  Abort,   // cancelled (client gone, stop string seen by the server, engine shutdown)
  Error,   // the request's forward, logits or drafting failed; the engine goes on
};

// The finish_reason string of the OpenAI API: "stop", "length", "abort", "error".
inline const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Abort: return "abort";
    case FinishReason::Error: return "error";
  }
  return "error";
}

// For logs and CLI output: to_string(r), or "error: " + error (what failed) for Error.
inline std::string describe(FinishReason r, const std::string& error) {
  return r == FinishReason::Error ? "error: " + error : to_string(r);
}

}  // namespace mx
