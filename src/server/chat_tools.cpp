#include "server/chat_tools.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_depth.h"
#include "server/openai_api.h"
#include "server/structured_output.h"

namespace mx::server {

using ojson = nlohmann::ordered_json;

namespace {

constexpr size_t kMaxTools = 128;

bool present(const ojson& b, const char* key) { return b.contains(key) && !b[key].is_null(); }

// OpenAI: a-z, A-Z, 0-9, underscores and dashes, at most 64 characters (dots too, as vLLM allows).
bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

}  // namespace

std::shared_ptr<ToolRequest> parse_tools(const ojson& b, ToolFormat format) {
  // Checked with or without tools, as OpenAI does.
  if (present(b, "parallel_tool_calls") && !b["parallel_tool_calls"].is_boolean())
    throw ApiError(400, "'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
  if (!present(b, "tools")) {
    if (present(b, "tool_choice") && !(b["tool_choice"].is_string() && b["tool_choice"] == "none"))
      throw ApiError(400, "'tool_choice' needs 'tools'", "tool_choice");
    return nullptr;
  }
  const ojson& tools = b["tools"];
  if (!tools.is_array()) throw ApiError(400, "'tools' must be an array", "tools");
  if (tools.empty()) return nullptr;
  if (tools.size() > kMaxTools)
    throw ApiError(400, fmt::format("'tools' may hold at most {} tools, got {}", kMaxTools, tools.size()), "tools");
  auto req = std::make_shared<ToolRequest>();
  req->format = format;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const std::string at = fmt::format("tools[{}]", i);
    if (!t.is_object() || !t.contains("type") || t["type"] != "function")
      throw ApiError(400, at + " must be {\"type\": \"function\", \"function\": {...}} (function tools only)", "tools");
    if (!t.contains("function") || !t["function"].is_object())
      throw ApiError(400, at + ".function must be an object", "tools");
    const ojson& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string() || !valid_name(f["name"].get<std::string>()))
      throw ApiError(400, at + ".function.name must be 1 to 64 letters, digits, '_', '-' or '.'", "tools");
    ToolFunction fn;
    fn.name = f["name"].get<std::string>();
    if (req->find(fn.name)) throw ApiError(400, fmt::format("two tools are named '{}'", fn.name), "tools");
    if (present(f, "description") && !f["description"].is_string())
      throw ApiError(400, at + ".function.description must be a string", "tools");
    if (present(f, "strict") && !f["strict"].is_boolean())
      throw ApiError(400, at + ".function.strict must be a boolean", "tools");
    if (present(f, "parameters")) {
      const ojson& p = f["parameters"];
      if (!p.is_object()) throw ApiError(400, at + ".function.parameters must be a JSON Schema object", "tools");
      // The arguments are a JSON object (a call's "arguments" is one, and every format
      // writes one): a schema of anything else could never be called.
      if (p.contains("type") && p["type"] != "object" && p["type"] != ojson::array({"object"}))
        throw ApiError(400, at + ".function.parameters must describe an object (\"type\": \"object\"), not " +
                                p["type"].dump(), "tools");
      fn.parameters = p;
    }
    req->functions.push_back(std::move(fn));
  }
  if (present(b, "tool_choice")) {
    const ojson& c = b["tool_choice"];
    if (c.is_string()) {
      const std::string s = c.get<std::string>();
      if (s == "none") req->choice = ToolChoice::None;
      else if (s == "auto") req->choice = ToolChoice::Auto;
      else if (s == "required") req->choice = ToolChoice::Required;
      else throw ApiError(400, "'tool_choice' must be none, auto, required or a function", "tool_choice");
    } else if (c.is_object() && c.contains("type") && c["type"] == "function" && c.contains("function") &&
               c["function"].is_object() && c["function"].contains("name") && c["function"]["name"].is_string()) {
      req->choice = ToolChoice::Named;
      req->named = c["function"]["name"].get<std::string>();
      if (!req->find(req->named))
        throw ApiError(400, fmt::format("'tool_choice' names '{}', which is not in 'tools'", req->named),
                       "tool_choice");
    } else {
      throw ApiError(400, "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": "
                          "{\"name\": ...}}",
                     "tool_choice");
    }
  }
  if (present(b, "parallel_tool_calls")) req->parallel = b["parallel_tool_calls"].get<bool>();
  if (req->choice != ToolChoice::None && format == ToolFormat::None)
    throw ApiError(400, "this model's chat template writes no tool calls in a format this server reads", "tools");
  return req;
}

ojson tool_messages(const nlohmann::json& messages, ToolFormat format) {
  ojson out = ojson(messages);
  const bool arguments_as_text = format == ToolFormat::DeepSeekV3 || format == ToolFormat::DeepSeekV31;
  for (size_t i = 0; i < out.size(); ++i) {
    ojson& m = out[i];
    if (!m.is_object() || !m.contains("tool_calls") || m["tool_calls"].is_null()) continue;
    const std::string at = fmt::format("messages[{}].tool_calls", i);
    // No text beside the calls: "" for templates that use the content as text
    // (GLM's would print "None"); DeepSeek's test for none to render calls alone.
    if (!arguments_as_text && (!m.contains("content") || m["content"].is_null())) m["content"] = "";
    MX_CHECK(m.contains("role") && m["role"] == "assistant", "{}: only assistant messages carry tool calls", at);
    MX_CHECK(m["tool_calls"].is_array(), "{} must be an array", at);
    for (size_t k = 0; k < m["tool_calls"].size(); ++k) {
      ojson& call = m["tool_calls"][k];
      MX_CHECK(call.is_object() && call.contains("function") && call["function"].is_object(),
               "{}[{}] must be {{\"type\": \"function\", \"function\": {{\"name\", \"arguments\"}}}}", at, k);
      if (!call.contains("type")) call["type"] = "function";
      ojson& f = call["function"];
      MX_CHECK(f.contains("name") && f["name"].is_string(), "{}[{}].function.name must be a string", at, k);
      if (!f.contains("arguments") || f["arguments"].is_null()) f["arguments"] = ojson::object();
      ojson& a = f["arguments"];
      if (a.is_string()) {
        MX_CHECK(json_depth_at_most(a.get_ref<const std::string&>()),
                 "{}[{}].function.arguments nests more than {} deep", at, k, kMaxJsonDepth);
        ojson parsed = ojson::parse(a.get<std::string>(), nullptr, false);
        MX_CHECK(!parsed.is_discarded() && parsed.is_object(), "{}[{}].function.arguments is not a JSON object", at,
                 k);
        if (!arguments_as_text) a = std::move(parsed);
      } else {
        MX_CHECK(a.is_object(), "{}[{}].function.arguments must be a JSON object or its text", at, k);
        if (arguments_as_text) a = a.dump();
      }
    }
  }
  return out;
}

ojson with_tools_system_prompt(const ojson& messages, const ToolRequest& req, const ojson& tools) {
  std::string text =
      "You may call one or more of these functions to help with the user's request. Each is given as a JSON "
      "object with its name, description and a JSON Schema of its arguments:\n";
  for (const auto& t : tools) text += t["function"].dump() + "\n";
  text += "To call a function, answer with the call in this format:\n" + tool_call_example(req.format) + "\n";
  ojson out = messages;
  if (!out.empty() && out[0].is_object() && out[0].contains("role") && out[0]["role"] == "system" &&
      out[0].contains("content") && out[0]["content"].is_string()) {
    out[0]["content"] = text + "\n" + out[0]["content"].get<std::string>();
  } else {
    out.insert(out.begin(), ojson{{"role", "system"}, {"content", text}});
  }
  return out;
}

std::shared_ptr<grammar::GrammarMasks> tool_choice_grammar(StructuredOutputs& so, const ToolRequest& req) {
  ojson key = {{"format", tool_format_name(req.format)},
               {"named", req.choice == ToolChoice::Named ? req.named : ""},
               {"parallel", req.parallel}};
  for (const ToolFunction& f : req.functions) key["tools"].push_back({f.name, f.parameters});
  try {
    return so.compile_grammar(key.dump(), [&] { return tool_call_grammar(req); }, tool_markers(req.format));
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "tools");
  }
}

}  // namespace mx::server
