// Tool calling: each family's call format parsed whole and incrementally (any
// chunking gives the same calls and content), the tool_choice grammar's
// sentences parse back into calls whose arguments fit the schemas, and the
// server answering tool_choice required / named / auto on the synthetic
// families (random weights, their real chat templates and tokenizers) with
// message.tool_calls, plain and streamed, and taking earlier calls and tool
// results in the conversation.
#include <gtest/gtest.h>

#include <random>

#include "grammar/json_validate.h"
#include "server/tool_calls.h"
#include "server_test_util.h"

using namespace mxtest;
using mx::server::ParsedOutput;
using mx::server::ToolCall;
using mx::server::ToolCallStream;
using mx::server::ToolChoice;
using mx::server::ToolFormat;
using mx::server::ToolRequest;
using ojson = nlohmann::ordered_json;

namespace {

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["c", "f"]}},
                   "required": ["city"]}}},
  {"type": "function", "function": {"name": "add", "description": "Adds two integers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}
])";

ToolRequest request_for(ToolFormat f, ToolChoice choice = ToolChoice::Auto, bool parallel = true) {
  ToolRequest r;
  r.format = f;
  r.choice = choice;
  r.parallel = parallel;
  for (const auto& t : ojson::parse(kTools)) r.functions.push_back({t["function"]["name"], t["function"]["parameters"]});
  return r;
}

// The same text through the stream in pieces of `step` bytes.
ParsedOutput streamed(const ToolRequest& req, const std::string& text, size_t step) {
  ParsedOutput out;
  ToolCallStream s(req);
  for (size_t i = 0; i < text.size(); i += step) out.content += s.push(text.substr(i, step), out.calls);
  out.content += s.finish(out.calls);
  return out;
}

void expect_same_in_any_chunking(const ToolRequest& req, const std::string& text) {
  const ParsedOutput whole = mx::server::parse_tool_calls(req, text);
  for (size_t step : {1, 2, 3, 7, 100}) {
    const ParsedOutput s = streamed(req, text, step);
    EXPECT_EQ(s.content, whole.content) << "step " << step;
    ASSERT_EQ(s.calls.size(), whole.calls.size()) << "step " << step;
    for (size_t i = 0; i < s.calls.size(); ++i) {
      EXPECT_EQ(s.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(s.calls[i].arguments, whole.calls[i].arguments);
    }
  }
}

struct Case {
  ToolFormat format;
  std::string text;
  std::string content;                 // expected content
  std::vector<ToolCall> calls;         // expected calls
};

}  // namespace

TEST(ToolCalls, EachFamilysFormatParsesWholeAndInAnyChunking) {
  const std::string ds_b = "<｜tool▁calls▁begin｜>", ds_e = "<｜tool▁calls▁end｜>", c_b = "<｜tool▁call▁begin｜>",
                    c_e = "<｜tool▁call▁end｜>", sep = "<｜tool▁sep｜>";
  const std::vector<Case> cases = {
      {ToolFormat::Hermes,
       "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>",
       "Let me check.\n\n",
       {{"get_weather", R"({"city":"Paris"})"}, {"add", R"({"a":1,"b":2})"}}},
      // An unterminated last call that parses is still a call; a broken one stays text.
      {ToolFormat::Hermes, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}", "",
       {{"add", R"({"a":1,"b":2})"}}},
      {ToolFormat::Hermes, "a <tool_call>{\"name\": oops}</tool_call> b", "a <tool_call>{\"name\": oops}</tool_call> b",
       {}},
      {ToolFormat::Hermes, "x < y and <tool", "x < y and <tool", {}},
      {ToolFormat::Glm45,
       "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>12</arg_value>\n<arg_key>unit</arg_key>\n"
       "<arg_value>\"c\"</arg_value>\n</tool_call><tool_call>add\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n"
       "<arg_key>b</arg_key>\n<arg_value>-2</arg_value>\n</tool_call>",
       "",
       // city is a string by the schema (raw "12"); unit has no type, so its JSON text is parsed.
       {{"get_weather", R"({"city":"12","unit":"c"})"}, {"add", R"({"a":1,"b":-2})"}}},
      {ToolFormat::DeepSeekV3,
       "Sure." + ds_b + c_b + "function" + sep + "add\n```json\n{\"a\": 1, \"b\": 2}\n```" + c_e + "\n" + c_b +
           "function" + sep + "get_weather\n```json\n{\"city\": \"Oslo\"}\n```" + c_e + ds_e,
       "Sure.",
       {{"add", R"({"a":1,"b":2})"}, {"get_weather", R"({"city":"Oslo"})"}}},
      {ToolFormat::DeepSeekV31, ds_b + c_b + "add" + sep + "{\"a\": 3, \"b\": 4}" + c_e + ds_e, "",
       {{"add", R"({"a":3,"b":4})"}}},
      // The model may stop (EOS) before closing the calls block.
      {ToolFormat::DeepSeekV31, ds_b + c_b + "add" + sep + "{\"a\": 3, \"b\": 4}" + c_e, "",
       {{"add", R"({"a":3,"b":4})"}}},
      // Cut by max_tokens inside a later call: the finished calls, and the rest as text.
      {ToolFormat::DeepSeekV31, ds_b + c_b + "add" + sep + "{\"a\": 3, \"b\": 4}" + c_e + c_b + "add" + sep + "{\"a\":",
       c_b + "add" + sep + "{\"a\":", {{"add", R"({"a":3,"b":4})"}}},
      {ToolFormat::Llama3Json, "  {\"name\": \"add\", \"parameters\": {\"a\": 5, \"b\": 6}}", "",
       {{"add", R"({"a":5,"b":6})"}}},
      {ToolFormat::Llama3Json, "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 5, \"b\": 6}}", "",
       {{"add", R"({"a":5,"b":6})"}}},
      {ToolFormat::Llama3Json, "The answer is {not a call}", "The answer is {not a call}", {}},
      {ToolFormat::Llama3Json, "{not a call", "{not a call", {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(tool_format_name(c.format)) + ": " + c.text);
    const ToolRequest req = request_for(c.format);
    const ParsedOutput p = mx::server::parse_tool_calls(req, c.text);
    EXPECT_EQ(p.content, c.content);
    ASSERT_EQ(p.calls.size(), c.calls.size());
    for (size_t i = 0; i < p.calls.size(); ++i) {
      EXPECT_EQ(p.calls[i].name, c.calls[i].name);
      EXPECT_EQ(p.calls[i].arguments, c.calls[i].arguments);
    }
    expect_same_in_any_chunking(req, c.text);
  }
}

// A model's output nesting past kMaxJsonDepth is not a call (parsed, its arguments would be copied
// and dumped, one recursion per level: 100,000 overflowed the stack); it stays text.
TEST(ToolCalls, OutputNestedTooDeepIsTextNotACall) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string text = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": " + deep + "}}\n</tool_call>";
  const ParsedOutput out = parse_tool_calls(request_for(ToolFormat::Hermes), text);
  EXPECT_TRUE(out.calls.empty());
  EXPECT_EQ(out.content.size(), text.size());
  const std::string ok = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": [[1]]}}\n</tool_call>";
  EXPECT_EQ(parse_tool_calls(request_for(ToolFormat::Hermes), ok).calls.size(), 1u);
}

TEST(ToolCalls, TemplatesAreRecognisedByTheirCallFormat) {
  const std::pair<const char*, ToolFormat> files[] = {
      {"Qwen-Qwen3-0.6B.jinja", ToolFormat::Hermes},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolFormat::Hermes},
      {"zai-org-GLM-4.5.jinja", ToolFormat::Glm45},
      {"deepseek-ai-DeepSeek-V3.jinja", ToolFormat::DeepSeekV3},
      {"deepseek-ai-DeepSeek-V3.1.jinja", ToolFormat::DeepSeekV31},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolFormat::Llama3Json},
  };
  for (const auto& [file, format] : files)
    EXPECT_EQ(mx::server::detect_tool_format(slurp(source_dir() / "data" / "chat_templates" / file)),
              format)
        << file;
  EXPECT_EQ(mx::server::detect_tool_format("{{ messages }}"), ToolFormat::None);
}

// Random byte walks through the required-call grammar: every complete output
// parses into calls of the allowed functions with arguments valid for their schemas.
TEST(ToolCalls, RequiredCallGrammarsSentencesAreValidCalls) {
  const nlohmann::json tools = nlohmann::json::parse(kTools);
  for (ToolFormat f : {ToolFormat::Hermes, ToolFormat::Glm45, ToolFormat::DeepSeekV3, ToolFormat::DeepSeekV31,
                       ToolFormat::Llama3Json}) {
    for (ToolChoice choice : {ToolChoice::Required, ToolChoice::Named}) {
      ToolRequest req = request_for(f, choice);
      if (choice == ToolChoice::Named) req.named = "add";
      SCOPED_TRACE(std::string(tool_format_name(f)) + (choice == ToolChoice::Named ? " named" : " required"));
      const mx::grammar::Grammar g = mx::server::tool_call_grammar(req);
      std::mt19937 rng(11);
      int complete = 0;
      for (int walk = 0; walk < 30; ++walk) {
        mx::grammar::Matcher m(g);
        std::string out;
        for (int step = 0; step < 3000 && !m.must_end(); ++step) {
          if (m.complete() && rng() % 3 == 0) break;
          const mx::grammar::ByteSet next = m.next_bytes();
          std::vector<uint8_t> bytes, structural;
          for (int b = 0; b < 256; ++b)
            if (next.has(uint8_t(b))) {
              bytes.push_back(uint8_t(b));
              if (std::string_view("\"}]<\n,0123456789").find(char(b)) != std::string_view::npos)
                structural.push_back(uint8_t(b));
            }
          ASSERT_FALSE(bytes.empty()) << "dead end after " << out;
          // Prefer closing bytes so walks end; plain ASCII otherwise.
          const auto& from = (!structural.empty() && rng() % 2) ? structural : bytes;
          uint8_t b = from[rng() % from.size()];
          if (b >= 0x80 && rng() % 8) continue;
          ASSERT_TRUE(m.accept_bytes(std::string(1, char(b))));
          out += char(b);
        }
        if (!m.complete()) continue;
        ++complete;
        const ParsedOutput p = mx::server::parse_tool_calls(req, out);
        EXPECT_EQ(p.content.find_first_not_of(" \n"), std::string::npos) << out;
        ASSERT_FALSE(p.calls.empty()) << out;
        for (const ToolCall& c : p.calls) {
          const mx::server::ToolFunction* fn = req.find(c.name);
          ASSERT_NE(fn, nullptr) << out;
          if (choice == ToolChoice::Named) {
            EXPECT_EQ(c.name, "add");
          }
          const nlohmann::json schema = nlohmann::json::parse(fn->parameters.dump());
          EXPECT_EQ(validate_json(nlohmann::json::parse(c.arguments), schema, schema), "") << out;
        }
      }
      EXPECT_GE(complete, 5);
    }
  }
}

namespace {

// parallel_tool_calls is false unless asked: a random-weight model may call again and again until max_tokens.
json tool_body(const json& tool_choice, bool stream = false, bool parallel = false) {
  json b = {{"messages", json::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}}})},
            {"tools", json::parse(kTools)},
            {"temperature", 0},
            {"max_tokens", 400},
            {"stream", stream},
            {"parallel_tool_calls", parallel}};
  if (!tool_choice.is_null()) b["tool_choice"] = tool_choice;
  return b;
}

// The calls of a non-streamed answer, checked against the schemas.
json answer_calls(int port, const json& body, const std::string& what) {
  auto r = post(port, "/v1/chat/completions", body);
  EXPECT_EQ(r.status, 200) << what << ": " << r.body;
  if (r.status != 200) return json::array();
  const json& ch = r.j["choices"][0];
  // Several calls may run into max_tokens: the finished calls still come back.
  if (!body["parallel_tool_calls"] || ch["finish_reason"] != "length") {
    EXPECT_EQ(ch["finish_reason"], "tool_calls") << what << ": " << r.body;
  }
  const json calls = ch["message"].value("tool_calls", json::array());
  EXPECT_FALSE(calls.empty()) << what << ": " << r.body;
  const json tools = json::parse(kTools);
  for (const json& c : calls) {
    EXPECT_EQ(c["type"], "function");
    EXPECT_EQ(c["id"].get<std::string>().rfind("call_", 0), 0u);
    bool known = false;
    for (const json& t : tools)
      if (t["function"]["name"] == c["function"]["name"]) {
        known = true;
        const json& schema = t["function"]["parameters"];
        const json args = json::parse(c["function"]["arguments"].get<std::string>(), nullptr, false);
        EXPECT_EQ(validate_json(args, schema, schema), "") << what << ": " << r.body;
      }
    EXPECT_TRUE(known) << what << ": " << r.body;
  }
  return calls;
}

}  // namespace

TEST(ToolCalls, EveryFamilyAnswersRequiredAndNamedCallsPlainAndStreamed) {
  for (const char* arch : {"qwen3", "glm4_moe", "deepseek_v3", "llama"}) {
    SCOPED_TRACE(arch);
    TempDir d;
    const std::string m = synthetic_model_dir(d, arch, 5);
    // The tools' descriptions take ~700 tokens of the synthetic vocabulary: a longer context than the tiny preset's.
    set_context_length(m, 2048);
    TestServer srv(m, TestServer::with_own_tokenizer(m), m);
    const json required = answer_calls(srv.port(), tool_body("required"), std::string(arch) + " required");
    answer_calls(srv.port(), tool_body("required", false, true), std::string(arch) + " required, parallel");
    const json named_choice = {{"type", "function"}, {"function", {{"name", "add"}}}};
    const json named = answer_calls(srv.port(), tool_body(named_choice), std::string(arch) + " named");
    ASSERT_EQ(named.size(), 1u);
    EXPECT_EQ(named[0]["function"]["name"], "add");

    // Streamed: the same calls, as delta.tool_calls chunks with their index.
    auto s = post_stream(srv.port(), "/v1/chat/completions", tool_body("required", true));
    ASSERT_EQ(s.status, 200);
    json calls = json::array();
    std::string finish;
    for (const json& chunk : s.chunks) {
      const json& ch = chunk["choices"][0];
      if (ch.contains("delta") && ch["delta"].contains("tool_calls"))
        for (const json& c : ch["delta"]["tool_calls"]) {
          EXPECT_EQ(c["index"], calls.size());
          json plain = c;
          plain.erase("index");
          calls.push_back(plain);
        }
      if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    }
    EXPECT_EQ(finish, "tool_calls");
    ASSERT_EQ(calls.size(), required.size());
    for (size_t i = 0; i < calls.size(); ++i) EXPECT_EQ(calls[i]["function"], required[i]["function"]) << i;

    // auto: whatever the model says, a 200; none: no calls parsed.
    auto a = post(srv.port(), "/v1/chat/completions", tool_body("auto"));
    EXPECT_EQ(a.status, 200) << a.body;
    auto n = post(srv.port(), "/v1/chat/completions", tool_body("none"));
    EXPECT_EQ(n.status, 200) << n.body;
    EXPECT_FALSE(n.j["choices"][0]["message"].contains("tool_calls"));

    // A conversation with an earlier call and its result renders through the template.
    json conv = tool_body("auto");
    conv["messages"].push_back({{"role", "assistant"},
                                {"content", nullptr},
                                {"tool_calls", json::array({{{"id", "call_1"},
                                                             {"type", "function"},
                                                             {"function", {{"name", "get_weather"},
                                                                           {"arguments", "{\"city\": \"Paris\"}"}}}}})}});
    conv["messages"].push_back({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "18 C, sunny"}});
    auto c = post(srv.port(), "/v1/chat/completions", conv);
    EXPECT_EQ(c.status, 200) << c.body;
  }
}

TEST(ToolCalls, BadToolRequestsAreA400NamingTheField) {
  TempDir d;
  const std::string m = synthetic_model_dir(d, "qwen3");
  TestServer srv(m, TestServer::with_own_tokenizer(m), m);
  auto expect_400 = [&](json body, const std::string& param) {
    auto r = post(srv.port(), "/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400) << body.dump() << " -> " << r.body;
    if (r.status == 400) {
      EXPECT_EQ(r.j["error"]["param"], param) << r.body;
    }
  };
  json b = tool_body("required");
  b["tools"] = "get_weather";
  expect_400(b, "tools");
  b = tool_body("required");
  b["tools"][0]["type"] = "retrieval";
  expect_400(b, "tools");
  b = tool_body({{"type", "function"}, {"function", {{"name", "nope"}}}});
  expect_400(b, "tool_choice");
  b = tool_body("sometimes");
  expect_400(b, "tool_choice");
  b = tool_body("required");
  b["tools"][1]["function"]["name"] = "get_weather";
  expect_400(b, "tools");
  b = tool_body("required");
  b["tools"][1]["function"]["parameters"]["properties"]["a"]["minimum"] = 0;
  expect_400(b, "tools");  // a keyword the constraint cannot honour
  b = tool_body("required");
  b["response_format"] = {{"type", "json_object"}};
  expect_400(b, "response_format");
  b = tool_body(nullptr);
  b.erase("tools");
  b["tool_choice"] = "required";
  expect_400(b, "tool_choice");
  b = tool_body("auto");
  b["messages"].push_back({{"role", "assistant"},
                           {"tool_calls", json::array({{{"function", {{"name", "add"}, {"arguments", "[1"}}}}})}});
  expect_400(b, "messages");
  // Arguments are an object: a schema of anything else could never be called (it came
  // back as plain content, no tool_calls, under tool_choice "required").
  b = tool_body("required");
  b["tools"][1]["function"]["parameters"] = {{"type", "array"}, {"items", {{"type", "integer"}}}};
  expect_400(b, "tools");
  b = tool_body("required");
  b["tools"][1]["function"]["parameters"]["properties"]["a"]["type"] = json::array();
  expect_400(b, "tools");  // matches nothing
  b = tool_body("auto");
  b["tools"][0]["function"]["description"] = 5;
  expect_400(b, "tools");
  b = tool_body("auto");
  b["tools"][0]["function"]["strict"] = "x";
  expect_400(b, "tools");
  b = tool_body(nullptr);
  b.erase("tools");
  b["parallel_tool_calls"] = "x";  // checked with or without tools
  expect_400(b, "parallel_tool_calls");
}
