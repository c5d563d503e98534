#include "server/tool_calls.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "core/json_depth.h"
#include "grammar/json_schema.h"

namespace mx::server {

using ojson = nlohmann::ordered_json;

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>", kHermesClose = "</tool_call>";
constexpr std::string_view kArgKey = "<arg_key>", kArgKeyEnd = "</arg_key>", kArgValue = "<arg_value>",
                           kArgValueEnd = "</arg_value>";
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>", kDsCallsEnd = "<｜tool▁calls▁end｜>",
                           kDsCallBegin = "<｜tool▁call▁begin｜>", kDsCallEnd = "<｜tool▁call▁end｜>",
                           kDsSep = "<｜tool▁sep｜>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

std::string_view trim(std::string_view s) {
  const auto ws = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// JSON in the model's output, or discarded where it is not JSON or nests deeper than
// kMaxJsonDepth (a value that deep is not a tool call, and copying it would overflow the stack).
ojson parse_json(std::string_view text) {
  return json_depth_at_most(text) ? ojson::parse(text, nullptr, false) : ojson(ojson::value_t::discarded);
}

// An arguments value -> the JSON text of an object; false when it is not one.
bool arguments_text(const ojson& a, std::string& out) {
  if (a.is_string()) {  // some models write the arguments as a JSON string
    const ojson inner = parse_json(a.get<std::string>());
    if (inner.is_discarded() || !inner.is_object()) return false;
    out = inner.dump();
    return true;
  }
  if (!a.is_object()) return false;
  out = a.dump();
  return true;
}

// {"name": ..., "arguments" | "parameters": {...}} -> a call.
bool json_call(std::string_view text, std::vector<ToolCall>& calls) {
  const ojson j = parse_json(trim(text));
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  ToolCall c;
  c.name = j["name"].get<std::string>();
  const char* key = j.contains("arguments") ? "arguments" : "parameters";
  if (!j.contains(key)) {
    c.arguments = "{}";
  } else if (!arguments_text(j[key], c.arguments)) {
    return false;
  }
  if (c.name.empty()) return false;
  calls.push_back(std::move(c));
  return true;
}

// The type a function's parameter schema gives a property ("" when it says none).
std::string property_type(const ToolFunction* f, const std::string& key) {
  if (!f || !f->parameters.is_object() || !f->parameters.contains("properties")) return "";
  const ojson& props = f->parameters["properties"];
  if (!props.is_object() || !props.contains(key) || !props[key].is_object()) return "";
  const ojson& p = props[key];
  return p.contains("type") && p["type"].is_string() ? p["type"].get<std::string>() : "";
}

// GLM-4.5: "f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n...". A value is
// raw text when the schema says string, else JSON when it parses (vLLM's
// glm4_moe parser does the same), else raw text.
bool glm_call(const ToolRequest& req, std::string_view block, std::vector<ToolCall>& calls) {
  size_t p = block.find(kArgKey);
  const std::string name(trim(block.substr(0, p)));
  if (name.empty() || name.find('\n') != std::string::npos) return false;
  const ToolFunction* f = req.find(name);
  ojson args = ojson::object();
  while (p != std::string_view::npos) {
    const size_t k0 = p + kArgKey.size(), k1 = block.find(kArgKeyEnd, k0);
    if (k1 == std::string_view::npos) return false;
    const std::string key(trim(block.substr(k0, k1 - k0)));
    const size_t v0 = block.find(kArgValue, k1);
    if (v0 == std::string_view::npos || !trim(block.substr(k1 + kArgKeyEnd.size(), v0 - k1 - kArgKeyEnd.size())).empty())
      return false;
    const size_t v1 = block.find(kArgValueEnd, v0);
    if (v1 == std::string_view::npos) return false;
    const std::string raw(block.substr(v0 + kArgValue.size(), v1 - v0 - kArgValue.size()));
    if (property_type(f, key) == "string") {
      args[key] = raw;
    } else {
      const ojson v = parse_json(raw);
      args[key] = v.is_discarded() ? ojson(raw) : v;
    }
    p = block.find(kArgKey, v1);
    if (!trim(block.substr(v1 + kArgValueEnd.size(), (p == std::string_view::npos ? block.size() : p) - v1 -
                                                         kArgValueEnd.size()))
             .empty())
      return false;
  }
  calls.push_back({name, args.dump()});
  return true;
}

// DeepSeek: the calls block's "<｜tool▁call▁begin｜>...<｜tool▁call▁end｜>" items,
// each "function<｜tool▁sep｜>f\n```json\n{...}\n```" (V3) or "f<｜tool▁sep｜>{...}" (V3.1).
// A block the model did not finish (unterminated; e.g. max_tokens cut it)
// keeps the calls before the first item that does not parse, and *rest gets
// the text from that item on.
bool deepseek_calls(std::string_view block, bool terminated, std::vector<ToolCall>& calls,
                    std::string* rest_out = nullptr) {
  std::vector<ToolCall> found;
  size_t p = 0;
  const auto partial = [&](size_t from) {
    if (terminated || found.empty() || !rest_out) return false;
    *rest_out = std::string(block.substr(from));
    calls.insert(calls.end(), found.begin(), found.end());
    return true;
  };
  while (true) {
    const size_t item_at = p;
    const std::string_view rest = trim(block.substr(p));
    if (rest.empty()) break;
    if (!starts_with(rest, kDsCallBegin)) return partial(item_at);
    p = size_t(rest.data() - block.data()) + kDsCallBegin.size();
    size_t e = block.find(kDsCallEnd, p);
    if (e == std::string_view::npos) {
      if (terminated) return false;
      e = block.size();  // the model stopped inside its last call
    }
    const std::string_view item = block.substr(p, e - p);
    const size_t sep = item.find(kDsSep);
    if (sep == std::string_view::npos) return partial(item_at);
    std::string_view name = item.substr(0, sep), args = item.substr(sep + kDsSep.size());
    if (name == "function") {  // V3: the name, then the arguments in a json code block
      const size_t nl = args.find('\n');
      if (nl == std::string_view::npos) return partial(item_at);
      name = args.substr(0, nl);
      args = trim(args.substr(nl + 1));
      if (!starts_with(args, "```json") || args.size() < 10 || args.substr(args.size() - 3) != "```")
        return partial(item_at);
      args = args.substr(7, args.size() - 10);
    }
    ToolCall c;
    c.name = std::string(trim(name));
    const ojson a = parse_json(trim(args));
    if (c.name.empty() || a.is_discarded() || !arguments_text(a, c.arguments)) return partial(item_at);
    found.push_back(std::move(c));
    p = e == block.size() ? e : e + kDsCallEnd.size();
  }
  if (found.empty()) return false;
  calls.insert(calls.end(), found.begin(), found.end());
  return true;
}

// Llama 3: the answer is one call object, or several separated by ';'.
bool llama_calls(std::string_view text, std::vector<ToolCall>& calls) {
  text = trim(text);
  if (starts_with(text, kPythonTag)) text = trim(text.substr(kPythonTag.size()));
  std::vector<ToolCall> found;
  if (!json_call(text, found)) {
    size_t p = 0;
    while (p <= text.size()) {
      const size_t semi = text.find(';', p);
      const std::string_view part = text.substr(p, semi == std::string_view::npos ? std::string_view::npos : semi - p);
      if (!json_call(part, found)) return false;
      if (semi == std::string_view::npos) break;
      p = semi + 1;
    }
  }
  calls.insert(calls.end(), found.begin(), found.end());
  return true;
}

// How much of s's end could be the start of tag (so must wait for more text).
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::None: return "none";
    case ToolFormat::Hermes: return "hermes";
    case ToolFormat::Glm45: return "glm45";
    case ToolFormat::DeepSeekV3: return "deepseek_v3";
    case ToolFormat::DeepSeekV31: return "deepseek_v31";
    case ToolFormat::Llama3Json: return "llama3_json";
  }
  return "?";
}

ToolFormat detect_tool_format(const std::string& src) {
  const auto has = [&](std::string_view s) { return src.find(s) != std::string::npos; };
  if (has(kArgKey) && has(kHermesOpen)) return ToolFormat::Glm45;
  if (has(kHermesOpen)) return ToolFormat::Hermes;
  if (has(kDsCallBegin)) return has("```json") ? ToolFormat::DeepSeekV3 : ToolFormat::DeepSeekV31;
  if (has("\"parameters\": dictionary of argument name")) return ToolFormat::Llama3Json;
  return ToolFormat::None;
}

std::vector<std::string> tool_markers(ToolFormat f) {
  switch (f) {
    case ToolFormat::Hermes: return {std::string(kHermesOpen), std::string(kHermesClose)};
    case ToolFormat::Glm45:
      return {std::string(kHermesOpen), std::string(kHermesClose), std::string(kArgKey),
              std::string(kArgKeyEnd),  std::string(kArgValue),    std::string(kArgValueEnd)};
    case ToolFormat::DeepSeekV3:
    case ToolFormat::DeepSeekV31:
      return {std::string(kDsCallsBegin), std::string(kDsCallsEnd), std::string(kDsCallBegin),
              std::string(kDsCallEnd), std::string(kDsSep)};
    case ToolFormat::Llama3Json: return {std::string(kPythonTag)};
    case ToolFormat::None: break;
  }
  return {};
}

std::string tool_call_example(ToolFormat f) {
  switch (f) {
    case ToolFormat::Hermes:
      return std::string(kHermesOpen) + "\n{\"name\": \"NAME\", \"arguments\": ARGUMENTS}\n" +
             std::string(kHermesClose);
    case ToolFormat::Glm45:
      return std::string(kHermesOpen) + "NAME\n" + std::string(kArgKey) + "KEY" + std::string(kArgKeyEnd) + "\n" +
             std::string(kArgValue) + "VALUE" + std::string(kArgValueEnd) + "\n" + std::string(kHermesClose);
    case ToolFormat::DeepSeekV3:
      return std::string(kDsCallsBegin) + std::string(kDsCallBegin) + "function" + std::string(kDsSep) +
             "NAME\n```json\nARGUMENTS\n```" + std::string(kDsCallEnd) + std::string(kDsCallsEnd);
    case ToolFormat::DeepSeekV31:
      return std::string(kDsCallsBegin) + std::string(kDsCallBegin) + "NAME" + std::string(kDsSep) + "ARGUMENTS" +
             std::string(kDsCallEnd) + std::string(kDsCallsEnd);
    case ToolFormat::Llama3Json: return "{\"name\": \"NAME\", \"parameters\": ARGUMENTS}";
    case ToolFormat::None: break;
  }
  return {};
}

const ToolFunction* ToolRequest::find(std::string_view name) const {
  for (const ToolFunction& f : functions)
    if (f.name == name) return &f;
  return nullptr;
}

// ------------------------------------------------------------------ parsing

ToolCallStream::ToolCallStream(const ToolRequest& req) : req_(req) {
  switch (req.format) {
    case ToolFormat::Hermes:
    case ToolFormat::Glm45:
      start_ = kHermesOpen, end_ = kHermesClose;
      break;
    case ToolFormat::DeepSeekV3:
    case ToolFormat::DeepSeekV31:
      start_ = kDsCallsBegin, end_ = kDsCallsEnd;
      break;
    case ToolFormat::Llama3Json:
    case ToolFormat::None: break;
  }
}

bool ToolCallStream::parse_block(std::string_view block, bool terminated, std::vector<ToolCall>& calls) const {
  switch (req_.format) {
    case ToolFormat::Hermes: return json_call(block, calls);
    case ToolFormat::Glm45: return glm_call(req_, block, calls);
    case ToolFormat::DeepSeekV3:
    case ToolFormat::DeepSeekV31: return deepseek_calls(block, terminated, calls);
    case ToolFormat::Llama3Json: return llama_calls(block, calls);
    case ToolFormat::None: break;
  }
  return false;
}

std::string ToolCallStream::push(std::string_view text, std::vector<ToolCall>& calls) {
  buf_ += text;
  if (req_.format == ToolFormat::None) return std::exchange(buf_, {});
  if (req_.format == ToolFormat::Llama3Json) {
    // Decided by the answer's first non-blank text: a call starts with '{' or the python tag.
    if (json_answer_ < 0) {
      const std::string_view t = trim(buf_);
      if (t.empty()) return {};
      if (t[0] == '{' || starts_with(t, kPythonTag)) json_answer_ = 1;
      else if (partial_tag(t, kPythonTag) == t.size()) return {};
      else json_answer_ = 0;
    }
    return json_answer_ ? std::string() : std::exchange(buf_, {});
  }
  std::string out;
  while (true) {
    if (!inside_) {
      const size_t p = buf_.find(start_);
      if (p == std::string::npos) {
        const size_t keep = partial_tag(buf_, start_);
        out += buf_.substr(0, buf_.size() - keep);
        buf_.erase(0, buf_.size() - keep);
        return out;
      }
      out += buf_.substr(0, p);
      buf_.erase(0, p);
      inside_ = true;
    }
    const size_t e = buf_.find(end_, start_.size());
    if (e == std::string::npos) return out;
    const std::string_view block = std::string_view(buf_).substr(start_.size(), e - start_.size());
    if (!parse_block(block, true, calls)) out += buf_.substr(0, e + end_.size());
    buf_.erase(0, e + end_.size());
    inside_ = false;
  }
}

std::string ToolCallStream::finish(std::vector<ToolCall>& calls) {
  std::string rest = std::exchange(buf_, {});
  if (req_.format == ToolFormat::Llama3Json) {
    if (json_answer_ == 1 && llama_calls(rest, calls)) return {};
    return rest;
  }
  if (inside_) {
    inside_ = false;
    const std::string_view block = std::string_view(rest).substr(start_.size());
    if (parse_block(block, false, calls)) return {};
    std::string tail;
    if ((req_.format == ToolFormat::DeepSeekV3 || req_.format == ToolFormat::DeepSeekV31) &&
        deepseek_calls(block, false, calls, &tail))
      return tail;
  }
  return rest;
}

ParsedOutput parse_tool_calls(const ToolRequest& req, std::string_view text) {
  ParsedOutput out;
  ToolCallStream s(req);
  out.content = s.push(text, out.calls);
  out.content += s.finish(out.calls);
  return out;
}

// ------------------------------------------------------------------ grammar

namespace {

using grammar::Element;
using grammar::Grammar;
using Seq = std::vector<Element>;

Seq cat(std::initializer_list<Seq> parts) {
  Seq s;
  for (const Seq& p : parts) s.insert(s.end(), p.begin(), p.end());
  return s;
}

uint32_t rule(Grammar& g, const std::string& name, const std::vector<Seq>& alts) {
  const uint32_t r = g.add_rule(name);
  for (const Seq& a : alts) g.add_alt(r, a);
  return r;
}

Seq R(uint32_t r) { return {Grammar::ref(r)}; }

const ojson& parameters_of(const ToolFunction& f) {
  static const ojson kNoArguments = {{"type", "object"}, {"properties", ojson::object()}};
  return f.parameters.is_null() ? kNoArguments : f.parameters;
}

// A GLM string value, written raw (no quotes, no escapes): any text without
// '<' (which would start the closing tag); with minLength / maxLength, that
// many printable ASCII characters (so bytes count code points); an enum, one
// of its strings.
uint32_t glm_raw_string(Grammar& g, const std::string& where, const ojson& schema) {
  for (const auto& [k, v] : schema.items())
    MX_CHECK(k == "type" || k == "description" || k == "title" || k == "minLength" || k == "maxLength" ||
                 k == "enum" || k == "default" || k == "examples",
             "tool argument {}: '{}' is not supported for a string argument in GLM's raw format", where, k);
  if (schema.contains("enum")) {
    const uint32_t r = g.add_rule("glm-enum " + where);
    for (const auto& e : schema["enum"]) {
      MX_CHECK(e.is_string() && e.get<std::string>().find('<') == std::string::npos,
               "tool argument {}: enum values must be strings without '<'", where);
      g.add_alt(r, g.literal(e.get<std::string>()));
    }
    MX_CHECK(!g.alternatives(r).empty(), "tool argument {}: empty enum", where);
    return r;
  }
  grammar::ByteSet ch;
  const bool bounded = schema.contains("minLength") || schema.contains("maxLength");
  for (int b = 0; b < 256; ++b)
    if (b != '<' && (!bounded || (b >= 0x20 && b < 0x7F) || b == '\n' || b == '\t')) ch.add(uint8_t(b));
  if (!bounded) {
    const uint32_t r = g.add_rule("glm-raw " + where);
    g.add_alt(r, cat({{g.bytes(ch)}, R(r)}));
    g.add_alt(r, {});
    return r;
  }
  auto count = [&](const char* k, int64_t def) {
    if (!schema.contains(k)) return def;
    MX_CHECK(schema[k].is_number_integer() && schema[k].get<int64_t>() >= 0 && schema[k].get<int64_t>() <= 4096,
             "tool argument {}: '{}' must be an integer in [0, 4096]", where, k);
    return schema[k].get<int64_t>();
  };
  const int64_t lo = count("minLength", 0), hi = count("maxLength", 4096);
  MX_CHECK(lo <= hi, "tool argument {}: minLength > maxLength", where);
  // r_k: up to k more characters; the value: lo characters, then r_(hi - lo).
  uint32_t rest = g.add_rule("glm-raw-end " + where);
  g.add_alt(rest, {});
  for (int64_t k = 0; k < hi - lo; ++k) {
    const uint32_t r = g.add_rule("glm-raw-upto " + where);
    g.add_alt(r, {});
    g.add_alt(r, cat({{g.bytes(ch)}, R(rest)}));
    rest = r;
  }
  Seq value;
  for (int64_t k = 0; k < lo; ++k) value.push_back(g.bytes(ch));
  value.push_back(Grammar::ref(rest));
  return rule(g, "glm-raw " + where, {value});
}

// GLM's arguments: each property as a key/value pair, in the schema's order,
// the required ones always and the others optionally; strings raw.
Seq glm_arguments(Grammar& g, const ToolFunction& f) {
  const ojson& params = parameters_of(f);
  MX_CHECK(params.is_object(), "tool '{}': 'parameters' must be a JSON Schema object", f.name);
  std::vector<std::string> required;
  if (params.contains("required") && params["required"].is_array())
    for (const auto& r : params["required"])
      if (r.is_string()) required.push_back(r.get<std::string>());
  Seq out;
  if (!params.contains("properties")) return out;
  MX_CHECK(params["properties"].is_object(), "tool '{}': 'properties' must be an object", f.name);
  for (const auto& [key, schema] : params["properties"].items()) {
    const bool is_string = schema.is_object() && schema.contains("type") && schema["type"] == "string";
    const uint32_t value = is_string ? glm_raw_string(g, f.name + "." + key, schema)
                                     : grammar::add_json_schema(g, schema, &params);
    const Seq pair = cat({g.literal(std::string(kArgKey) + key + std::string(kArgKeyEnd) + "\n" +
                                    std::string(kArgValue)),
                          R(value), g.literal(std::string(kArgValueEnd) + "\n")});
    if (std::find(required.begin(), required.end(), key) != required.end()) {
      out.insert(out.end(), pair.begin(), pair.end());
    } else {
      out.push_back(Grammar::ref(rule(g, "glm-optional-" + key, {pair, {}})));
    }
  }
  return out;
}

Seq one_call(Grammar& g, ToolFormat fmt, const ToolFunction& f) {
  auto args = [&] { return R(grammar::add_json_schema(g, parameters_of(f))); };
  switch (fmt) {
    case ToolFormat::Hermes:
      return cat({g.literal(std::string(kHermesOpen) + "\n{\"name\": \"" + f.name + "\", \"arguments\": "), args(),
                  g.literal("}\n" + std::string(kHermesClose))});
    case ToolFormat::Glm45:
      return cat({g.literal(std::string(kHermesOpen) + f.name + "\n"), glm_arguments(g, f),
                  g.literal(std::string(kHermesClose))});
    case ToolFormat::DeepSeekV3:
      return cat({g.literal(std::string(kDsCallBegin) + "function" + std::string(kDsSep) + f.name + "\n```json\n"),
                  args(), g.literal("\n```" + std::string(kDsCallEnd))});
    case ToolFormat::DeepSeekV31:
      return cat({g.literal(std::string(kDsCallBegin) + f.name + std::string(kDsSep)), args(),
                  g.literal(std::string(kDsCallEnd))});
    case ToolFormat::Llama3Json:
      return cat({g.literal("{\"name\": \"" + f.name + "\", \"parameters\": "), args(), g.literal("}")});
    case ToolFormat::None: break;
  }
  fail("this model's chat template has no tool-call format");
}

}  // namespace

grammar::Grammar tool_call_grammar(const ToolRequest& req) {
  Grammar g;
  const uint32_t call = g.add_rule("call");
  for (const ToolFunction& f : req.functions)
    if (req.choice != ToolChoice::Named || f.name == req.named) g.add_alt(call, one_call(g, req.format, f));
  MX_CHECK(!g.alternatives(call).empty(), "tool_choice names no function of 'tools'");
  // Llama 3's template renders one call per answer.
  const bool several = req.parallel && req.format != ToolFormat::Llama3Json;
  const std::string sep = req.format == ToolFormat::DeepSeekV31 ? "" : "\n";
  uint32_t calls = call;
  if (several) {
    calls = g.add_rule("calls");
    g.add_alt(calls, R(call));
    g.add_alt(calls, cat({R(call), g.literal(sep), R(calls)}));
  }
  Seq root = R(calls);
  if (req.format == ToolFormat::DeepSeekV3 || req.format == ToolFormat::DeepSeekV31)
    root = cat({g.literal(std::string(kDsCallsBegin)), R(calls), g.literal(std::string(kDsCallsEnd))});
  g.finish(root);
  return g;
}

}  // namespace mx::server
