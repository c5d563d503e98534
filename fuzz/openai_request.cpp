// libFuzzer target: the JSON body of every generation endpoint, through
// parse_request -- the function the HTTP server calls on each body -- with a
// small byte-level BPE tokenizer so text prompts, chats (the fallback chat
// format) and stop strings are exercised. First byte: the endpoint
// (bit 0 clear /v1/completions, set /v1/chat/completions), the tokenizer (bit 1)
// and structured outputs over it (bit 2: response_format, regex, guided_*
// compiled to token masks); the rest is the body.
// A request it accepts must be consistent: one max_tokens per prompt, each >= 1
// and within the context with its prompt.
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "tokenizer/tokenizer.h"
#include "server/openai_api.h"
#include "server/structured_output.h"

namespace {

const mx::Tokenizer& tokenizer() {
  static const std::unique_ptr<mx::Tokenizer> tok = [] {
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) vocab[mx::byte_level_char(uint8_t(b))] = b;
    const std::string sp = mx::byte_level_char(' ');
    nlohmann::json merges = nlohmann::json::array({sp + " t", "h e", sp + "t he", "o n", "i n"});
    int id = 256;
    for (const char* m : {"Ġt", "he", "Ġthe", "on", "in"}) vocab[m] = id++;
    nlohmann::json j = {
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
        {"added_tokens", {{{"id", id}, {"content", "<|endoftext|>"}, {"special", true}}}},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"decoder", {{"type", "ByteLevel"}}}};
    return mx::parse_tokenizer_hf(j, nlohmann::json(), "fuzz/tokenizer.json");
  }();
  return *tok;
}

mx::server::StructuredOutputs& structured() {
  static mx::server::StructuredOutputs so(tokenizer(), int64_t(tokenizer().vocab_size));
  return so;
}

}  // namespace

MXFUZZ_TARGET(openai_request) {
  if (size < 1) return 0;
  mx::server::ApiContext ctx;
  ctx.tokenizer = (data[0] & 2) ? &tokenizer() : nullptr;
  ctx.structured = (data[0] & 6) == 6 ? &structured() : nullptr;
  ctx.served_model_name = "m";
  ctx.context_length = 64;
  ctx.kv_capacity = 48;
  ctx.limits.max_tokens = 40;
  ctx.limits.max_prompts = 8;
  const auto kind = (data[0] & 1) ? mx::server::ApiKind::Chat : mx::server::ApiKind::Completion;
  try {
    const mx::server::ApiRequest r = mx::server::parse_request(kind, mxfuzz::as_string(data + 1, size - 1), ctx);
    if (r.prompts.empty() || r.max_tokens.size() != r.prompts.size()) std::abort();
    for (size_t i = 0; i < r.prompts.size(); ++i)
      if (r.prompts[i].empty() || r.max_tokens[i] < 1 ||
          int64_t(r.prompts[i].size()) + r.max_tokens[i] > ctx.context_length)
        std::abort();
  } catch (const mx::server::ApiError& e) {
    if (e.status != 400 && e.status != 404) std::abort();
  }
  return 0;
}
