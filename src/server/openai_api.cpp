#include "server/openai_api.h"

#include "chat/chat_template.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>

#include "core/error.h"
#include "core/json_depth.h"
#include "tokenizer/tokenizer.h"
#include "server/chat_prompt.h"
#include "server/chat_tools.h"
#include "grammar/regex.h"
#include "server/reasoning.h"

namespace mx::server {

using nlohmann::json;

ApiError::ApiError(int status_, const std::string& message, std::string param_, std::string code_,
                   std::string type_)
    : std::runtime_error(message),
      status(status_),
      type(std::move(type_)),
      param(std::move(param_)),
      code(std::move(code_)) {}

json error_body(const std::string& message, const std::string& type, const std::string& param,
                const std::string& code) {
  json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? json() : json(param);
  e["code"] = code.empty() ? json() : json(code);
  return json{{"error", e}};
}

json error_body(const ApiError& e) { return error_body(e.what(), e.type, e.param, e.code); }

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json parse_body(const std::string& body) {
  if (!json_depth_at_most(body))
    throw ApiError(400, fmt::format("the request body nests arrays and objects more than {} deep", kMaxJsonDepth));
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    // nlohmann's message: "[json.exception.parse_error.101] parse error at line 1, column 2: ..."
    std::string what = e.what();
    const size_t p = what.find("] ");
    throw ApiError(400, "invalid JSON in the request body: " + (p == std::string::npos ? what : what.substr(p + 2)));
  }
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return j;
}

namespace {
// Whether the body's response_format constrains the output (present, and not {"type": "text"}).
bool constrains_format(const json& b) {
  if (!b.contains("response_format") || b["response_format"].is_null()) return false;
  const json& rf = b["response_format"];
  return !(rf.is_object() && rf.contains("type") && rf["type"] == "text");
}

// Fields of vLLM's and sglang's APIs that would change the output and that this server
// does not implement: refused unless absent or at their neutral value, so a client
// never gets an output that silently ignored one.
void refuse_unimplemented(const json& b) {
  static const std::pair<const char*, json> kFields[] = {
      {"min_tokens", 0},
      {"guided_grammar", nullptr},
      {"ebnf", nullptr},
      {"guided_whitespace_pattern", nullptr},
      {"bad_words", nullptr},
      {"allowed_token_ids", nullptr},
      {"prompt_logprobs", nullptr},
      {"use_beam_search", false},
      {"include_stop_str_in_output", false},
      {"truncate_prompt_tokens", nullptr},
      {"logits_processors", nullptr},
      {"add_generation_prompt", true},
      {"continue_final_message", false},
      {"chat_template", nullptr}};
  for (const auto& [key, neutral] : kFields) {
    if (!b.contains(key) || b[key].is_null() || b[key] == neutral) continue;
    if ((b[key].is_array() || b[key].is_object()) && b[key].empty()) continue;  // [] and {} ask for nothing
    throw ApiError(400, fmt::format("'{}' is not supported by this server", key), key);
  }
}

// vLLM's current spelling of its guided_* fields: structured_outputs {"json" | "regex" |
// "choice": ...}, as guided_json / guided_regex / guided_choice. Returns the member
// given ("": none).
std::string structured_outputs_member(const json& b) {
  if (!b.contains("structured_outputs") || b["structured_outputs"].is_null()) return "";
  const json& so = b["structured_outputs"];
  if (!so.is_object()) throw ApiError(400, "'structured_outputs' must be an object", "structured_outputs");
  std::string member;
  for (auto it = so.begin(); it != so.end(); ++it) {
    if (it->is_null()) continue;
    if (it.key() != "json" && it.key() != "regex" && it.key() != "choice")
      throw ApiError(400, fmt::format("'structured_outputs.{}' is not supported (json, regex or choice)", it.key()),
                     "structured_outputs");
    if (!member.empty())
      throw ApiError(400, "'structured_outputs' may hold one of json, regex or choice", "structured_outputs");
    member = it.key();
  }
  return member;
}

// The one constraint on the output's text, from whichever field asks for it:
// response_format (OpenAI), regex (sglang), guided_regex / guided_json /
// guided_choice (vLLM), or a required tool call (already in r.response_format).
void parse_constraint(const json& b, const std::string& body, const ApiContext& ctx, ApiRequest& r) {
  refuse_unimplemented(b);
  std::vector<const char*> fields;
  for (const char* k : {"regex", "guided_regex", "guided_json", "guided_choice"})
    if (b.contains(k) && !b[k].is_null()) fields.push_back(k);
  const std::string so = structured_outputs_member(b);
  if (!so.empty()) fields.push_back("structured_outputs");
  if (constrains_format(b)) fields.push_back("response_format");
  if (fields.empty()) return;
  const char* param = fields[0];
  if (fields.size() > 1)
    throw ApiError(400, fmt::format("'{}' cannot be combined with '{}'", fields[1], param), fields[1]);
  if (r.response_format)
    throw ApiError(400, fmt::format("'{}' cannot be combined with a required tool call", param), param);
  if (!ctx.structured)
    throw ApiError(400, fmt::format("'{}' needs the model's tokenizer (this server has none)", param), param);
  // k: the field as vLLM's guided_* name; `name` as the request spells it, for messages.
  const bool nested = param == std::string_view("structured_outputs");
  const std::string k = nested ? "guided_" + so : param;
  const std::string name = nested ? "structured_outputs." + so : k;
  // A schema's properties come out in the request's order: the body parsed again keeping it.
  nlohmann::ordered_json v;
  if (k == "response_format" || k == "guided_json") {
    const nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(body);
    v = nested ? parsed["structured_outputs"][so] : parsed[k];
  } else {
    v = nested ? b["structured_outputs"][so] : b[k];
  }
  try {
    if (k == "response_format") {
      r.response_format = ctx.structured->compile(v);
    } else if (k == "guided_json") {  // a schema, or its JSON text
      if (!v.is_object() && !v.is_string())
        throw ApiError(400, fmt::format("'{}' must be a JSON Schema (an object or its text)", name), param);
      nlohmann::ordered_json schema = v;
      if (v.is_string()) {
        if (!json_depth_at_most(v.get<std::string>()))  // as the body's own limit (a deep copy overflows a stack)
          throw ApiError(400, fmt::format("'{}' nests arrays and objects more than {} deep", name, kMaxJsonDepth),
                         param);
        try {
          schema = nlohmann::ordered_json::parse(v.get<std::string>());
        } catch (const nlohmann::json::exception&) {
          throw ApiError(400, fmt::format("'{}' is a string that is not JSON", name), param);
        }
      }
      r.response_format = ctx.structured->compile({{"type", "json_schema"}, {"json_schema", {{"schema", schema}}}});
    } else if (k == "guided_choice") {  // exactly one of the strings
      if (!v.is_array() || v.empty() || !std::all_of(v.begin(), v.end(), [](const auto& c) { return c.is_string(); }))
        throw ApiError(400, fmt::format("'{}' must be a non-empty array of strings", name), param);
      r.response_format = ctx.structured->compile_grammar("choice " + v.dump(), [&] {
        grammar::Grammar g;
        const uint32_t any = g.add_rule("choice");
        for (const auto& c : v) g.add_alt(any, g.literal(c.get<std::string>()));
        g.finish({grammar::Grammar::ref(any)});
        return g;
      }, {});
    } else {  // regex, guided_regex: the whole output matches the expression (grammar/regex.h)
      if (!v.is_string()) throw ApiError(400, fmt::format("'{}' must be a string", name), param);
      const std::string pattern = v.get<std::string>();
      r.response_format = ctx.structured->compile_grammar(
          "regex " + pattern, [&] { return grammar::regex_grammar(pattern); }, {});
    }
  } catch (const Error& e) {
    throw ApiError(400, e.what(), param);
  }
}
}  // namespace

ApiRequest parse_request(ApiKind kind, const std::string& body, const ApiContext& ctx) {
  const json b = parse_body(body);
  ApiRequest r;
  try {
    if (kind == ApiKind::Chat && b.contains("tools")) {
      // Tools keep their members' order (a schema's properties): parsed again, in order.
      const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body);
      r = parse_chat_request(b, ctx, &ordered);
    } else if (kind == ApiKind::Chat) {
      r = parse_chat_request(b, ctx);
    } else {
      r = parse_completion_request(b, ctx);
    }
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {  // e.g. the tokenizer refusing input
    throw ApiError(400, e.what());
  }
  // n choices per prompt: each its own engine request with its own seed stream
  // (seed + j), prompt-major as OpenAI numbers them; the prompt's KV is shared
  // through the prefix cache.
  if (r.n > 1) {
    if (r.prompts.size() * size_t(r.n) > size_t(ctx.limits.max_prompts))
      throw ApiError(400,
                     fmt::format("{} prompts x n = {} choices exceed this server's limit of {}", r.prompts.size(), r.n,
                                 ctx.limits.max_prompts),
                     "n");
    std::vector<std::vector<int32_t>> prompts;
    std::vector<int> max_tokens;
    for (size_t i = 0; i < r.prompts.size(); ++i)
      for (int j = 0; j < r.n; ++j) {
        prompts.push_back(r.prompts[i]);
        max_tokens.push_back(r.max_tokens[i]);
      }
    r.prompts = std::move(prompts);
    r.max_tokens = std::move(max_tokens);
  }
  parse_constraint(b, body, ctx, r);
  return r;
}

std::string make_id(const std::string& prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t base = [] {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd() ^
           uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  }();
  uint64_t x = base + 0x9E3779B97F4A7C15ull * ++counter;  // splitmix64
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  return prefix + fmt::format("{:016x}{:08x}", mix(x), uint32_t(mix(x + 1)));
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  return json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

namespace {

bool has(const json& b, const char* key) { return b.contains(key) && !b[key].is_null(); }

double get_number(const json& b, const char* key, double def) {
  if (!has(b, key)) return def;
  const json& v = b[key];
  if (!v.is_number()) throw ApiError(400, fmt::format("'{}' must be a number", key), key);
  const double d = v.get<double>();
  if (!std::isfinite(d)) throw ApiError(400, fmt::format("'{}' must be finite", key), key);
  return d;
}

int64_t get_int(const json& b, const char* key, int64_t def) {
  if (!has(b, key)) return def;
  const json& v = b[key];
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    throw ApiError(400, fmt::format("'{}' = {} is too large", key, v.get<uint64_t>()), key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {  // 16.0 is an integer too
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) return int64_t(d);
  }
  throw ApiError(400, fmt::format("'{}' must be an integer", key), key);
}

bool get_bool(const json& b, const char* key, bool def) {
  if (!has(b, key)) return def;
  if (!b[key].is_boolean()) throw ApiError(400, fmt::format("'{}' must be a boolean", key), key);
  return b[key].get<bool>();
}

uint64_t random_seed() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t base = [] {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd();
  }();
  uint64_t z = base + 0x9E3779B97F4A7C15ull * ++counter;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void check_model(const json& b, const ApiContext& ctx, ApiRequest& r) {
  if (!has(b, "model")) {
    r.model = ctx.served_model_name;
    return;
  }
  if (!b["model"].is_string()) throw ApiError(400, "'model' must be a string", "model");
  r.model = b["model"].get<std::string>();
  if (r.model != ctx.served_model_name)
    throw ApiError(404, fmt::format("The model '{}' does not exist (this server serves '{}')", r.model,
                                    ctx.served_model_name),
                   "model", "model_not_found");
}

// Fields shared by both endpoints: sampling, stop, stream, n, ...
void parse_common(const json& b, const ApiContext& ctx, ApiRequest& r) {
  const int64_t n = get_int(b, "n", 1);
  if (n < 1 || n > ctx.limits.max_prompts)
    throw ApiError(400, fmt::format("'n' must be in [1, {}], got {}", ctx.limits.max_prompts, n), "n");
  r.n = int(n);

  SamplingParams& s = r.sampling;
  s.temperature = float(get_number(b, "temperature", 1.0));
  s.top_p = float(get_number(b, "top_p", 1.0));
  const int64_t top_k = get_int(b, "top_k", 0);
  if (top_k < -1 || top_k > std::numeric_limits<int>::max())
    throw ApiError(400, "'top_k' must be -1 or 0 (off) or a positive integer", "top_k");
  s.top_k = top_k < 0 ? 0 : int(top_k);
  s.min_p = float(get_number(b, "min_p", 0.0));
  s.presence_penalty = float(get_number(b, "presence_penalty", 0.0));
  s.frequency_penalty = float(get_number(b, "frequency_penalty", 0.0));
  s.repetition_penalty = float(get_number(b, "repetition_penalty", 1.0));
  s.seed = has(b, "seed") ? uint64_t(get_int(b, "seed", 0)) : random_seed();
  try {
    s.validate();
  } catch (const Error& e) {
    std::string msg = e.what(), param;
    if (msg.rfind("sampling: ", 0) == 0) {
      msg = msg.substr(10);
      param = msg.substr(0, msg.find(' '));
    }
    throw ApiError(400, msg, param);
  }

  if (has(b, "stop")) {
    const json& st = b["stop"];
    if (st.is_string()) {
      r.stop.push_back(st.get<std::string>());
    } else if (st.is_array()) {
      if (st.size() > size_t(ctx.limits.max_stop))
        throw ApiError(400, fmt::format("'stop' may hold at most {} strings, got {}", ctx.limits.max_stop, st.size()),
                       "stop");
      for (const auto& x : st) {
        if (!x.is_string()) throw ApiError(400, "'stop' must be a string or an array of strings", "stop");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      throw ApiError(400, "'stop' must be a string or an array of strings", "stop");
    }
    for (const auto& x : r.stop) {
      if (x.empty()) throw ApiError(400, "'stop' strings must not be empty", "stop");
      if (x.size() > size_t(ctx.limits.max_stop_bytes))
        throw ApiError(400, fmt::format("a 'stop' string is {} bytes, over the limit of {}", x.size(),
                                        ctx.limits.max_stop_bytes),
                       "stop");
    }
    if (!r.stop.empty() && !ctx.tokenizer)
      throw ApiError(400, "stop strings need a tokenizer and this model has none; use stop_token_ids", "stop");
  }
  if (has(b, "stop_token_ids")) {
    const json& st = b["stop_token_ids"];
    if (!st.is_array()) throw ApiError(400, "'stop_token_ids' must be an array of token ids", "stop_token_ids");
    if (st.size() > size_t(ctx.limits.max_stop_token_ids))
      throw ApiError(400, fmt::format("'stop_token_ids' may hold at most {} ids, got {}", ctx.limits.max_stop_token_ids,
                                      st.size()),
                     "stop_token_ids");
    for (const auto& x : st) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > std::numeric_limits<int32_t>::max())
        throw ApiError(400, "'stop_token_ids' must be an array of token ids", "stop_token_ids");
      if (ctx.vocab_size > 0 && x.get<int64_t>() >= ctx.vocab_size)
        throw ApiError(400, fmt::format("stop token id {} is outside the vocabulary [0, {})", x.get<int64_t>(),
                                        ctx.vocab_size), "stop_token_ids");
      r.stop_token_ids.push_back(int32_t(x.get<int64_t>()));
    }
  }
  r.ignore_eos = get_bool(b, "ignore_eos", false);
  r.stream = get_bool(b, "stream", false);
  if (get_bool(b, "return_token_ids", false)) r.token_events = true;
  if (has(b, "stream_options")) {
    const json& so = b["stream_options"];
    if (!r.stream)
      throw ApiError(400, "'stream_options' is only allowed when 'stream' is true", "stream_options");
    if (!so.is_object()) throw ApiError(400, "'stream_options' must be an object", "stream_options");
    r.include_usage = get_bool(so, "include_usage", false);
  }
  if (has(b, "logit_bias") && !(b["logit_bias"].is_object() && b["logit_bias"].empty()))
    throw ApiError(400, "'logit_bias' is not supported", "logit_bias");
  // Taken and not used (an end-user id for abuse monitoring), but of OpenAI's type.
  if (has(b, "user") && !b["user"].is_string()) throw ApiError(400, "'user' must be a string", "user");
}

void resolve_max_tokens(const json& b, const char* key, int def, const ApiContext& ctx, ApiRequest& r) {
  const bool given = has(b, key);
  int64_t v = get_int(b, key, def);
  if (given && v == 0 && r.echo) {  // echo only: score the prompt (the engine's one token is dropped)
    r.prompt_only = true;
    v = 1;
  }
  if (given && v < 1)
    throw ApiError(400, fmt::format("'{}' must be at least 1{}, got {}", key, r.echo ? " (0 with echo)" : "", v), key);
  if (v > std::numeric_limits<int>::max()) throw ApiError(400, fmt::format("'{}' is too large", key), key);
  const int cap = ctx.limits.max_tokens;
  if (given && cap > 0 && v > cap)
    throw ApiError(400, fmt::format("'{}' = {} exceeds this server's limit of {}", key, v, cap), key);
  const int64_t limit = ctx.kv_capacity > 0 ? std::min(ctx.context_length, ctx.kv_capacity) : ctx.context_length;
  const char* prompt_param = r.kind == ApiKind::Chat ? "messages" : "prompt";
  for (const auto& p : r.prompts) {
    if (ctx.limits.max_prompt_tokens > 0 && int64_t(p.size()) > ctx.limits.max_prompt_tokens)
      throw ApiError(400,
                     fmt::format("the prompt ({} tokens) exceeds this server's limit of {} prompt tokens", p.size(),
                                 ctx.limits.max_prompt_tokens),
                     prompt_param, "context_length_exceeded");
    const int64_t room = limit - int64_t(p.size());
    if (room < 1)
      throw ApiError(400,
                     limit < ctx.context_length
                         ? fmt::format("the prompt ({} tokens) leaves no room to generate in the KV cache's {} "
                                       "tokens per sequence",
                                       p.size(), limit)
                         : fmt::format("the prompt ({} tokens) leaves no room to generate in the model's context of "
                                       "{} tokens",
                                       p.size(), ctx.context_length),
                     prompt_param, "context_length_exceeded");
    if (given && int64_t(p.size()) + v > ctx.context_length)
      throw ApiError(400,
                     fmt::format("the prompt ({} tokens) + {} ({}) = {} tokens exceeds the model's context of {} "
                                 "tokens",
                                 p.size(), key, v, int64_t(p.size()) + v, ctx.context_length),
                     key, "context_length_exceeded");
    // Defaults are cut to what fits; explicit values are not.
    r.max_tokens.push_back(int(given ? v : std::min<int64_t>({v, room, cap > 0 ? cap : v})));
  }
}

std::vector<int32_t> token_array(const json& a, const char* param) {
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (const auto& x : a) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > std::numeric_limits<int32_t>::max())
      throw ApiError(400, fmt::format("'{}' token ids must be non-negative integers", param), param);
    ids.push_back(int32_t(x.get<int64_t>()));
  }
  return ids;
}

// A text far too long for the context is refused without tokenizing it (a 7 MB
// prompt took 1.5 s of CPU before the length check said no).
void check_text_fits(const ApiContext& ctx, const std::string& text, const char* param) {
  if (!ctx.max_token_bytes) return;
  int64_t limit = ctx.context_length;
  if (ctx.limits.max_prompt_tokens > 0) limit = std::min<int64_t>(limit, ctx.limits.max_prompt_tokens);
  const int64_t at_least = int64_t(text.size() / (2 * ctx.max_token_bytes));  // 2x: normalizers may grow text
  if (at_least > limit)
    throw ApiError(400,
                   fmt::format("the prompt ({} bytes, at least {} tokens) exceeds the limit of {} prompt tokens",
                               text.size(), at_least, limit),
                   param, "context_length_exceeded");
}

std::vector<int32_t> encode_text(const ApiContext& ctx, const std::string& text, const char* param) {
  if (!ctx.tokenizer) throw ApiError(400, "this model has no tokenizer; send token ids", param);
  check_text_fits(ctx, text, param);
  return ctx.tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/true);
}

}  // namespace

ApiRequest parse_completion_request(const json& b, const ApiContext& ctx) {
  ApiRequest r;
  r.kind = ApiKind::Completion;
  check_model(b, ctx, r);
  if (!b.contains("prompt")) throw ApiError(400, "'prompt' is required", "prompt");
  const json& p = b["prompt"];
  const char* kShape = "'prompt' must be a string, an array of strings, an array of token ids or an array of "
                       "token-id arrays";
  if (p.is_string()) {
    r.prompts.push_back(encode_text(ctx, p.get<std::string>(), "prompt"));
  } else if (p.is_array()) {
    if (p.empty()) throw ApiError(400, "'prompt' is empty", "prompt");
    if (!p[0].is_number() && p.size() > size_t(ctx.limits.max_prompts))
      throw ApiError(400, fmt::format("'prompt' holds {} prompts, over this server's limit of {} per request", p.size(),
                                      ctx.limits.max_prompts),
                     "prompt");
    if (p[0].is_number()) {
      r.token_events = true;
      r.prompts.push_back(token_array(p, "prompt"));
    } else if (p[0].is_string()) {
      for (const auto& x : p) {
        if (!x.is_string()) throw ApiError(400, kShape, "prompt");
        r.prompts.push_back(encode_text(ctx, x.get<std::string>(), "prompt"));
      }
    } else if (p[0].is_array()) {
      r.token_events = true;
      for (const auto& x : p) {
        if (!x.is_array()) throw ApiError(400, kShape, "prompt");
        r.prompts.push_back(token_array(x, "prompt"));
      }
    } else {
      throw ApiError(400, kShape, "prompt");
    }
  } else {
    throw ApiError(400, kShape, "prompt");
  }
  for (const auto& x : r.prompts)
    if (x.empty()) throw ApiError(400, "the prompt is empty (no tokens)", "prompt");

  parse_common(b, ctx, r);
  r.echo = get_bool(b, "echo", false);
  if (has(b, "suffix") && !(b["suffix"].is_string() && b["suffix"].get<std::string>().empty()))
    throw ApiError(400, "'suffix' is not supported", "suffix");
  if (get_int(b, "best_of", 1) != 1) throw ApiError(400, "'best_of' must be 1 (or absent)", "best_of");
  if (has(b, "logprobs")) {
    const json& lp = b["logprobs"];
    if (lp.is_boolean()) {
      r.logprobs = lp.get<bool>();
    } else {
      // The sampled token's logprob, and the n most likely alternatives' (OpenAI: at most 5).
      const int64_t n = get_int(b, "logprobs", 0);
      if (n < 0 || n > 5) throw ApiError(400, "'logprobs' must be an integer in [0, 5]", "logprobs");
      r.logprobs = true;
      r.top_logprobs = int(n);
    }
  }
  resolve_max_tokens(b, "max_tokens", 16, ctx, r);
  return r;
}

ApiRequest parse_chat_request(const json& b, const ApiContext& ctx, const nlohmann::ordered_json* ordered) {
  ApiRequest r;
  r.kind = ApiKind::Chat;
  check_model(b, ctx, r);
  if (!b.contains("messages")) throw ApiError(400, "'messages' is required", "messages");
  if (!ctx.tokenizer) throw ApiError(400, "this model has no tokenizer; send token ids (to /v1/completions)", "messages");
  nlohmann::ordered_json body = nlohmann::ordered_json::object();  // the tool fields
  for (const char* k : {"tools", "tool_choice", "parallel_tool_calls"})
    if (b.contains(k)) body[k] = ordered ? (*ordered)[k] : nlohmann::ordered_json(b[k]);
  std::shared_ptr<ToolRequest> tools = parse_tools(body, ctx.tool_format);
  // OpenAI's reasoning knob (its values vary by model): a variable for the chat template,
  // as vLLM passes it (gpt-oss's reads it), unless chat_template_kwargs sets one.
  if (has(b, "reasoning_effort") && !b["reasoning_effort"].is_string())
    throw ApiError(400, "'reasoning_effort' must be a string", "reasoning_effort");
  const bool use_tools = tools && tools->choice != ToolChoice::None;
  std::string text;
  bool templated = false;
  try {
    ChatTemplateOptions o;
    o.model_dir = ctx.model_dir;
    if (ctx.tokenizer->bos_id >= 0) o.bos_token = ctx.tokenizer->token_text(ctx.tokenizer->bos_id);
    if (ctx.tokenizer->eos_id >= 0) o.eos_token = ctx.tokenizer->token_text(ctx.tokenizer->eos_id);
    text = render_chat(b["messages"], o);  // validates the messages; the fallback format
    // The model's own chat template (tokenizer_config.json), when it has one.
    // chat_template_kwargs (vLLM / sglang): extra template variables, e.g. {"enable_thinking": false};
    // checked with or without a template to take them.
    if (has(b, "chat_template_kwargs") && !b["chat_template_kwargs"].is_object())
      throw ApiError(400, "'chat_template_kwargs' must be an object", "chat_template_kwargs");
    if (ctx.chat_template) {
      nlohmann::ordered_json extra = nlohmann::ordered_json::object();
      if (has(b, "chat_template_kwargs")) extra = nlohmann::ordered_json(b["chat_template_kwargs"]);
      if (has(b, "reasoning_effort") && !extra.contains("reasoning_effort"))
        extra["reasoning_effort"] = b["reasoning_effort"];
      nlohmann::ordered_json messages = tool_messages(b["messages"], ctx.tool_format);
      if (use_tools) {
        if (ctx.chat_template->tmpl.uses_variable("tools"))
          extra["tools"] = body["tools"];
        else
          messages = with_tools_system_prompt(messages, *tools, body["tools"]);
      }
      text = apply_chat_template(*ctx.chat_template, messages, true, extra);
      templated = true;
      r.reasoning = ctx.reasoning;
      r.reasoning_open = ctx.reasoning && ReasoningSplitter::prompt_opens_reasoning(text);
    }
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "messages");
  }
  if (use_tools) r.tools = tools;
  // A template writes BOS and every special token itself (as transformers'
  // apply_chat_template), so the tokenizer must not add them again.
  if (templated) {
    check_text_fits(ctx, text, "messages");
    r.prompts.push_back(ctx.tokenizer->encode(text, /*add_special=*/false, /*parse_special=*/true));
  }
  else
    r.prompts.push_back(encode_text(ctx, text, "messages"));
  if (r.prompts[0].empty()) throw ApiError(400, "the rendered chat prompt is empty", "messages");

  parse_common(b, ctx, r);
  if (use_tools && (tools->choice == ToolChoice::Required || tools->choice == ToolChoice::Named)) {
    if (constrains_format(b))
      throw ApiError(400, "'response_format' cannot be combined with a required tool call", "response_format");
    if (!ctx.structured) throw ApiError(400, "'tool_choice' needs the model's tokenizer", "tool_choice");
    r.response_format = tool_choice_grammar(*ctx.structured, *tools);
  }
  r.logprobs = get_bool(b, "logprobs", false);
  const int64_t top = get_int(b, "top_logprobs", 0);
  if (top < 0 || top > 20) throw ApiError(400, "'top_logprobs' must be an integer in [0, 20]", "top_logprobs");
  if (top > 0 && !r.logprobs)
    throw ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs");
  r.top_logprobs = int(top);
  const int def = std::numeric_limits<int>::max();
  resolve_max_tokens(b, has(b, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens", def, ctx, r);
  return r;
}

}  // namespace mx::server
