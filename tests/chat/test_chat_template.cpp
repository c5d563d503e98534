// Chat templates: the real templates of Llama-3.3, Qwen2.5, Qwen3, GLM-4.5 and
// DeepSeek-V3.1 (data/chat_templates, sources in SOURCES.md) render a
// conversation to exactly the text transformers' apply_chat_template produces.
// The expected strings are written by hand from each template's logic (and
// were cross-checked against Python's jinja2 with transformers' settings).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "chat/chat_template.h"
#include "test_util.h"

using namespace mx;
using ojson = nlohmann::ordered_json;

namespace {

namespace fs = std::filesystem;

std::string template_file(const std::string& name) {
  return mxtest::slurp(mxtest::source_dir() / "data" / "chat_templates" / name);
}

ChatTemplate load(const std::string& name) {
  std::string src = template_file(name);
  EXPECT_FALSE(src.empty()) << name;
  return ChatTemplate::parse(src);
}

// The conversation every family renders: system, user, assistant, user.
ojson conversation() {
  return ojson::parse(R"([
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hello!"},
    {"role": "assistant", "content": "Hi there! How can I help?"},
    {"role": "user", "content": "What is 2+2?"}
  ])");
}

ojson ctx(const ojson& messages, bool gen, const std::string& bos = "", const std::string& eos = "") {
  ojson c = ojson::object();
  c["messages"] = messages;
  c["add_generation_prompt"] = gen;
  c["bos_token"] = bos;
  c["eos_token"] = eos;
  return c;
}

std::string render(const std::string& src, const ojson& context = ojson::object()) {
  return ChatTemplate::parse(src).render(context);
}

// The mx::Error message of parsing + rendering `src`, or "" if it succeeds.
std::string error_of(const std::string& src, const ojson& context = ojson::object()) {
  try {
    ChatTemplate::parse(src).render(context);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const char* const kDsBos = "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";  // <｜begin▁of▁sentence｜>
const char* const kDsEos = "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
const char* const kDsUser = "<\xef\xbd\x9cUser\xef\xbd\x9c>";
const char* const kDsAssistant = "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>";

}  // namespace

// ---- the real templates ----

TEST(ChatTemplate, Llama33RendersConversation) {
  ChatTemplate t = load("meta-llama-Llama-3.3-70B-Instruct.jinja");
  EXPECT_EQ(t.render(ctx(conversation(), true, "<|begin_of_text|>", "<|eot_id|>")),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
            "You are a helpful assistant.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHi there! How can I help?<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // No system message: an empty one; date_string from the caller; content is trimmed.
  ojson c = ctx(ojson::parse(R"([{"role": "user", "content": "  Hi \n"}])"), false, "<|begin_of_text|>");
  c["date_string"] = "02 Jan 2025";
  EXPECT_EQ(t.render(c),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 02 Jan 2025\n\n<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

TEST(ChatTemplate, Llama33ToolsGoIntoTheFirstUserMessage) {
  ChatTemplate t = load("meta-llama-Llama-3.3-70B-Instruct.jinja");
  ojson c = ctx(ojson::parse(R"([{"role": "user", "content": "Weather in Paris?"}])"), true, "<|begin_of_text|>");
  c["tools"] = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])");
  EXPECT_EQ(t.render(c),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "Environment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n"
            "Given the following functions, please respond with a JSON for a function call with its proper "
            "arguments that best answers the given prompt.\n\n"
            "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its "
            "value}.Do not use variables.\n\n"
            "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n"
            "        \"parameters\": {\n            \"type\": \"object\"\n        }\n    }\n}\n\n"
            "Weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  // ... and with no user message to put them in, the template raises.
  c["messages"] = ojson::parse(R"([{"role": "system", "content": "S"}])");
  try {
    t.render(c);
    FAIL() << "expected raise_exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Cannot put tools in the first user message"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, Qwen25RendersConversation) {
  ChatTemplate t = load("Qwen-Qwen2.5-7B-Instruct.jinja");
  EXPECT_EQ(t.render(ctx(conversation(), true)),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHello!<|im_end|>\n"
            "<|im_start|>assistant\nHi there! How can I help?<|im_end|>\n"
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  // Without a system message Qwen2.5 supplies its own.
  EXPECT_EQ(t.render(ctx(ojson::parse(R"([{"role": "user", "content": "Hi"}])"), false)),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, Qwen25ToolCallsAndResponses) {
  ChatTemplate t = load("Qwen-Qwen2.5-7B-Instruct.jinja");
  ojson c = ctx(ojson::parse(R"([
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [
          {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "content": "sunny"}])"),
                true);
  c["tools"] = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Get the weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  EXPECT_EQ(t.render(c),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\n"
            "You may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
            "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather\", "
            "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, "
            "\"required\": [\"city\"]}}}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n"
            "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
            "</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplate, Qwen3RendersConversation) {
  ChatTemplate t = load("Qwen-Qwen3-0.6B.jinja");
  EXPECT_EQ(t.render(ctx(conversation(), true)),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHello!<|im_end|>\n"
            "<|im_start|>assistant\nHi there! How can I help?<|im_end|>\n"
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  ojson c = ctx(ojson::parse(R"([{"role": "user", "content": "Hi"}])"), true);
  c["enable_thinking"] = false;
  EXPECT_EQ(t.render(c), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatTemplate, Qwen3KeepsReasoningOnlyAfterTheLastQuery) {
  ChatTemplate t = load("Qwen-Qwen3-0.6B.jinja");
  ojson m = ojson::parse(R"([
      {"role": "user", "content": "Hello!"},
      {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nAnswer"}])");
  EXPECT_EQ(t.render(ctx(m, false)),
            "<|im_start|>user\nHello!<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nhmm\n</think>\n\nAnswer<|im_end|>\n");
  m.push_back({{"role", "user"}, {"content", "More?"}});
  EXPECT_EQ(t.render(ctx(m, true)),
            "<|im_start|>user\nHello!<|im_end|>\n"
            "<|im_start|>assistant\nAnswer<|im_end|>\n"
            "<|im_start|>user\nMore?<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplate, Glm45RendersConversation) {
  ChatTemplate t = load("zai-org-GLM-4.5.jinja");
  EXPECT_EQ(t.render(ctx(conversation(), true)),
            "[gMASK]<sop><|system|>\nYou are a helpful assistant."
            "<|user|>\nHello!"
            "<|assistant|>\n<think></think>\nHi there! How can I help?"
            "<|user|>\nWhat is 2+2?"
            "<|assistant|>");
  EXPECT_TRUE(t.iterates_content());
  // Content as a list of text parts; thinking switched off.
  ojson c = ctx(ojson::parse(R"([{"role": "user", "content": [{"type": "text", "text": "Hello"},
                                                               {"type": "text", "text": " world"}]}])"),
                true);
  c["enable_thinking"] = false;
  EXPECT_EQ(t.render(c), "[gMASK]<sop><|user|>\nHello world/nothink<|assistant|>\n<think></think>");
}

TEST(ChatTemplate, Glm45ToolCallsAsArgKeyValuePairs) {
  ChatTemplate t = load("zai-org-GLM-4.5.jinja");
  ojson m = ojson::parse(R"([
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "<think>Need a tool.</think>Checking.", "tool_calls": [
          {"function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
      {"role": "tool", "content": "sunny"}])");
  EXPECT_EQ(t.render(ctx(m, true)),
            "[gMASK]<sop><|user|>\nWeather?"
            "<|assistant|>\n<think>Need a tool.</think>\nChecking."
            "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
            "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>"
            "<|observation|>\n<tool_response>\nsunny\n</tool_response>"
            "<|assistant|>");
}

TEST(ChatTemplate, DeepseekV31RendersConversation) {
  ChatTemplate t = load("deepseek-ai-DeepSeek-V3.1.jinja");
  const std::string bos = kDsBos, eos = kDsEos, user = kDsUser, asst = kDsAssistant;
  EXPECT_EQ(t.render(ctx(conversation(), true, bos, eos)),
            bos + "You are a helpful assistant." + user + "Hello!" + asst + "</think>Hi there! How can I help?" + eos +
                user + "What is 2+2?" + asst + "</think>");
  // Several system messages are joined; thinking mode opens <think>.
  ojson c = ctx(ojson::parse(R"([{"role": "system", "content": "A"}, {"role": "system", "content": "B"},
                                 {"role": "user", "content": "q"}])"),
                true, bos, eos);
  c["thinking"] = true;
  EXPECT_EQ(t.render(c), bos + "A\n\nB" + user + "q" + asst + "<think>");
}

TEST(ChatTemplate, DeepseekV3OriginalRendersConversationAndToolCalls) {
  ChatTemplate t = load("deepseek-ai-DeepSeek-V3.jinja");
  const std::string bos = kDsBos, eos = kDsEos, user = kDsUser, asst = kDsAssistant;
  EXPECT_EQ(t.render(ctx(conversation(), true, bos, eos)),
            bos + "You are a helpful assistant." + user + "Hello!" + asst + "Hi there! How can I help?" + eos + user +
                "What is 2+2?" + asst);
  // An assistant turn with content none carries the tool calls; tool outputs follow.
  ojson m = ojson::parse(R"([{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
          "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "content": "sunny"}, {"role": "assistant", "content": "Sunny."}])");
  const std::string tcb = "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>";
  const std::string tb = "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>";
  const std::string te = "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>";
  const std::string sep = "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>";
  const std::string ob = "<\xef\xbd\x9ctool\xe2\x96\x81outputs\xe2\x96\x81" "begin\xef\xbd\x9c>";
  const std::string oe = "<\xef\xbd\x9ctool\xe2\x96\x81outputs\xe2\x96\x81" "end\xef\xbd\x9c>";
  const std::string o1 = "<\xef\xbd\x9ctool\xe2\x96\x81output\xe2\x96\x81" "begin\xef\xbd\x9c>";
  const std::string o2 = "<\xef\xbd\x9ctool\xe2\x96\x81output\xe2\x96\x81" "end\xef\xbd\x9c>";
  EXPECT_EQ(t.render(ctx(m, false, bos, eos)),
            bos + user + "Weather?" + asst + tcb + tb + "function" + sep + "get_weather\n```json\n{\"city\": \"Paris\"}\n```" +
                te + ob + o1 + "sunny" + o2 + oe + "Sunny." + eos);
}

// ---- the Jinja subset ----

TEST(ChatTemplate, WhitespaceControlMatchesTransformers) {
  // trim_blocks + lstrip_blocks, as transformers compiles templates.
  EXPECT_EQ(render("start\n  {% if true %}\n    indented\n  {% endif %}\n  {{ 'var' }}\n"
                   "{#- c -#}   {# c2 #}\nx   {%- if true -%}   y   {%- endif -%}   z\n"
                   "  {%+ if true %}plus{% endif +%}\nafter\n    {# comment #}\n"
                   "{% for i in [1, 2] %}\n  - {{ i }}\n{% endfor %}\n"
                   "{%- raw -%}\n  {{ raw }}  \n{%- endraw %}\nend\n"),
            "start\n    indented\n  varxyz\n  plus\nafter\n  - 1\n  - 2\n{{ raw }}end");
  EXPECT_EQ(render("a\r\nb\n"), "a\nb");  // newlines normalized, one trailing newline dropped
}

TEST(ChatTemplate, LoopsAndScopes) {
  ojson c = {{"items", {1, 2, 3}}};
  EXPECT_EQ(render("{% for x in items %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}"
                   "{{ loop.last }}{{ loop.length }};{% endfor %}",
                   c),
            "103TrueFalse3;212FalseFalse3;321FalseTrue3;");
  EXPECT_EQ(render("{% for x in items if x > 1 %}{{ x }}{% else %}none{% endfor %}|"
                   "{% for x in [] %}a{% else %}empty{% endfor %}",
                   c),
            "23|empty");
  // set inside a loop does not leak (not even into the next iteration); namespaces do.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in items %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", c), "2341");
  EXPECT_EQ(render("{% set ns = namespace(total=0) %}{% for i in items %}{% set ns.total = ns.total + i %}"
                   "{% endfor %}{{ ns.total }}",
                   c),
            "6");
  EXPECT_EQ(render("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}"
                   "{% endif %}{{ i }}{% endfor %}"),
            "0134");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in d | items %}{{ k }}"
                   "{% endfor %}",
                   ojson::parse(R"({"d": {"b": 1, "a": 2}})")),
            "b=1;a=2;ba");
}

TEST(ChatTemplate, ExpressionsFollowPython) {
  ojson c = ojson::parse(R"({"items": [1, 2, 3, 4, 5], "s": "hello", "d": {"k": "v"}})");
  EXPECT_EQ(render("{{ items[-1] }} {{ items[1:3] }} {{ items[::-1] }} {{ items[-2:] }} {{ s[1:3] }} {{ s[-1] }}", c),
            "5 [2, 3] [5, 4, 3, 2, 1] [4, 5] el o");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ true }} {{ 'a' + 'b' }} {{ [1] + [2] }} {{ 7 // 2 }} {{ -7 % 3 }} "
                   "{{ 1 / 4 }} {{ 2 ** 10 }} {{ 10 - 2 * 3 }} {{ items | length - 1 }}",
                   c),
            "a1NoneTrue ab [1, 2] 3 2 0.25 1024 4 4");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ not 1 == 2 }} {{ 0 or 'b' }} {{ 1 and 2 }} {{ 'x' if 1 > 2 else 'y' }} "
                   "{{ 'a' in 'cat' }} {{ 6 not in items }} {{ 'k' in d }}",
                   c),
            "True True b 2 y True True True");
  EXPECT_EQ(render("{{ d }} {{ ['a', 1, none, 1.5, 1e20, (1, 2)] }} {{ {'a': {'b': []}} }}", c),
            "{'k': 'v'} ['a', 1, None, 1.5, 1e+20, (1, 2)] {'a': {'b': []}}");
  EXPECT_EQ(render("{{ \"q\\\"uote\" }} {{ 'tab\\there' }} {{ '\\u00e9' }} {{ 'a' 'b' }}"), "q\"uote tab\there \xc3\xa9 ab");
}

TEST(ChatTemplate, FiltersTestsAndMethods) {
  ojson c = ojson::parse(R"({"items": [1, 2, 3], "s": "hello", "users": [{"name": "ann", "admin": true},
                            {"name": "bob", "admin": false}]})");
  EXPECT_EQ(render("{{ '  x  ' | trim }}|{{ s | upper }}|{{ s | title }}|{{ s | replace('l', 'L') }}|"
                   "{{ items | join(', ') }}|{{ items | first }}{{ items | last }}|{{ nope | default('d') }}|"
                   "{{ items | map('string') | join }}|{{ users | selectattr('admin') | map(attribute='name') | list }}|"
                   "{{ items | reject('equalto', 2) | list }}|{{ '42' | int + 1 }}|{{ items | sum }}",
                   c),
            "x|HELLO|Hello|heLLo|1, 2, 3|13|d|123|['ann']|[1, 3]|43|6");
  EXPECT_EQ(render("{{ x is defined }} {{ none is none }} {{ 'a' is string }} {{ s is iterable }} "
                   "{{ users[0] is mapping }} {{ 3 is odd }} {{ 6 is divisibleby 3 }} {{ s is not string }}",
                   c),
            "False True True True True True True False");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a.b.c'.rsplit('.', 1) }} "
                   "{{ 'xxhixx'.strip('x') }} {{ '\\n\\nhi'.lstrip('\\n') }} {{ 'Hello'.startswith('He') }} "
                   "{{ 'Hello'.endswith(('x', 'lo')) }} {{ '-'.join(['a', 'b']) }} {{ s.find('l') }}",
                   c),
            "['a', 'b', '', 'c'] ['a', 'b'] ['a.b', 'c'] hi hi True True a-b 2");
  // transformers' tojson: json.dumps with ensure_ascii=False by default.
  EXPECT_EQ(render("{{ {'a': 1, 'b': [1.0, none, true], 'c': '\xc3\xa9\"\\n'} | tojson }}|{{ 'e' | tojson }}|"
                   "{{ {'a': [1, {}]} | tojson(indent=2) }}|{{ '\xc3\xa9' | tojson(ensure_ascii=true) }}"),
            "{\"a\": 1, \"b\": [1.0, null, true], \"c\": \"\xc3\xa9\\\"\\n\"}|\"e\"|"
            "{\n  \"a\": [\n    1,\n    {}\n  ]\n}|\"\\u00e9\"");
}

TEST(ChatTemplate, MacrosAndSetBlocks) {
  EXPECT_EQ(render("{% macro m(a, b='B', c=none) %}[{{ a }}{{ b }}{{ c }}]{% endmacro %}"
                   "{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}{{ m(a='x', b='y') }}"),
            "[1BNone][12None][1B3][xyNone]");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{% set t %}v={{ a + b }}{% endset %}[{{ t }}]"), "[v=3]");
  EXPECT_TRUE(ChatTemplate::parse("{{ tools | length }}").uses_variable("tools"));
  EXPECT_FALSE(ChatTemplate::parse("{{ messages | length }}").uses_variable("tools"));
}

// ---- errors: an mx::Error naming the problem and where it is ----

TEST(ChatTemplate, SyntaxErrorsNameThePosition) {
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos;
  };
  std::string e = error_of("Hello {{ name");
  EXPECT_TRUE(has(e, "unclosed '{{'") && has(e, "line 1, column 7")) << e;
  e = error_of("Hello\n{% if x %}abc");
  EXPECT_TRUE(has(e, "unclosed '{% if %}'") && has(e, "{% endif %}") && has(e, "line 2, column 1")) << e;
  e = error_of("{# comment");
  EXPECT_TRUE(has(e, "unclosed comment") && has(e, "line 1, column 1")) << e;
  e = error_of("a\nb\n{{ x | frobnicate }}");
  EXPECT_TRUE(has(e, "unknown filter 'frobnicate'") && has(e, "line 3, column 8")) << e;
  e = error_of("{{ x is frob }}");
  EXPECT_TRUE(has(e, "unknown test 'frob'") && has(e, "line 1, column 9")) << e;
  e = error_of("{{ 1 + }}");
  EXPECT_TRUE(has(e, "unexpected '}}', expected an expression") && has(e, "line 1, column 8")) << e;
  e = error_of("{{ (1 + 2 }}");
  EXPECT_TRUE(has(e, "expected ')'")) << e;
  e = error_of("{{ 'abc }}");
  EXPECT_TRUE(has(e, "unterminated string literal") && has(e, "column 4")) << e;
  e = error_of("{% include 'other.jinja' %}");
  EXPECT_TRUE(has(e, "unsupported tag '{% include %}'") && has(e, "line 1, column 4")) << e;
  e = error_of("{% for x in y %}{% endif %}");
  EXPECT_TRUE(has(e, "unexpected '{% endif %}'")) << e;
  e = error_of("{% break %}");
  EXPECT_TRUE(has(e, "'break' outside a for loop")) << e;
  e = error_of("{{ x ? y }}");
  EXPECT_TRUE(has(e, "unexpected character '?'")) << e;
  e = error_of("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}");
  EXPECT_TRUE(has(e, "nests too deeply")) << e;
  // Chains build a node per link, each holding the one before: 30,000 links of '+' parsed, then
  // overflowed the stack rendering (a server's every chat request). Each link counts as nesting.
  std::string plus = "1", filters = "'a'", subscripts = "messages";
  for (int k = 0; k < 30000; ++k) plus += "+1", filters += "|upper", subscripts += "[0]";
  for (const std::string& chain : {plus, filters, subscripts}) {
    e = error_of("{{ " + chain + " }}");
    EXPECT_TRUE(has(e, "nests too deeply")) << e.substr(0, 200);
  }
  std::string short_plus = "1";
  for (int k = 0; k < 150; ++k) short_plus += "+1";
  EXPECT_EQ(error_of("{{ " + short_plus + " }}"), "");
}

TEST(ChatTemplate, RenderErrorsNameThePosition) {
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos;
  };
  std::string e = error_of("{{ raise_exception('Only user and assistant roles are supported!') }}");
  EXPECT_TRUE(has(e, "raised an error: Only user and assistant roles are supported!")) << e;
  e = error_of("line one\n  {{ foo.bar }}");
  EXPECT_TRUE(has(e, "'foo' is undefined") && has(e, "line 2")) << e;
  e = error_of("{{ 'a' + 1 }}");
  EXPECT_TRUE(has(e, "can only concatenate str")) << e;
  e = error_of("{{ 'a'.format(1) }}");
  EXPECT_TRUE(has(e, "string method 'format' is not supported")) << e;
  e = error_of("{% set x = 5 %}{% set x.y = 1 %}");
  EXPECT_TRUE(has(e, "non-namespace")) << e;
  e = error_of("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}");
  EXPECT_TRUE(has(e, "nest too deeply")) << e;
  e = error_of("{% for i in range(100000000) %}{% endfor %}");
  EXPECT_TRUE(has(e, "range() is too long")) << e;
  // Sizes held to the output's limit where they are built (each ran to bad_alloc, a 500): a count
  // whose product with the unit wrapped to 0 (2^62 x 4), doubling a string or list 40 times.
  e = error_of("{{ 'xxxx' * 4611686018427387904 }}");
  EXPECT_TRUE(has(e, "repetition result is too large")) << e;
  e = error_of("{{ ([1, 2, 3, 4] * 4611686018427387904)|length }}");
  EXPECT_TRUE(has(e, "repetition result is too large")) << e;
  for (const char* op : {"+", "~"}) {
    e = error_of(std::string("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ") + op +
                 " ns.s %}{% endfor %}{{ ns.s|length }}");
    EXPECT_TRUE(has(e, "larger than the output's limit of 64 MiB")) << e;
  }
  e = error_of("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}");
  EXPECT_TRUE(has(e, "larger than the output's limit of 64 MiB")) << e;
  e = error_of("{{ [[1]]|tojson(indent=1000000000) }}");
  EXPECT_TRUE(has(e, "indent 1000000000 is not in [-1, 1000]")) << e;
  e = error_of("{{ [[1]]|tojson(indent=-1000000000000) }}");  // wrapped to 727379968 as an int
  EXPECT_TRUE(has(e, "is not in [-1, 1000]")) << e;
  for (const char* grow : {"[ns.s, ns.s]|join", "ns.s|replace('x', 'xx')", "''.join([ns.s, ns.s])", "ns.s.replace('x', 'xx')"}) {
    e = error_of(std::string("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ") + grow +
                 " %}{% endfor %}{{ ns.s|length }}");
    EXPECT_TRUE(has(e, "larger than the output's limit of 64 MiB")) << grow << ": " << e;
  }
  e = error_of("{{ 'a'|indent(1000000000000) }}");
  EXPECT_TRUE(has(e, "width 1000000000000 is over 1000")) << e;
  EXPECT_EQ(ChatTemplate::parse("{{ 1e300|int }},{{ (-1e300)|int(7) }}").render(ojson::object()), "0,7");
}

// ---- model directories ----

TEST(ChatTemplate, ApplyReadsTokenizerConfig) {
  mxtest::TempDir d;
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(d.path() / name) << text;
  };
  nlohmann::json cfg = {
      {"chat_template", {{{"name", "tool_use"}, {"template", "TOOLS"}},
                         {{"name", "default"}, {"template", "{{ bos_token }}{% for m in messages %}[{{ m.role }}:"
                                                            "{{ m.content }}]{% endfor %}{% if add_generation_prompt %}"
                                                            "{{ eos_token }}{% endif %}"}}}},
      {"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}}},
      {"eos_token", "</s>"},
  };
  write("tokenizer_config.json", cfg.dump());
  nlohmann::json msgs = nlohmann::json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "a"},
                                                  {"type": "text", "text": "b"}]}])");
  // The template does not loop over content, so text parts are joined with "\n".
  EXPECT_EQ(apply_chat_template(d.path().string(), msgs, true), "<s>[user:a\nb]</s>");
  EXPECT_EQ(apply_chat_template(d.path().string(), msgs, false), "<s>[user:a\nb]");
  try {
    apply_chat_template(d.path().string(), ojson(msgs), true, ojson{{"tools", ojson::array({{{"type", "function"}}})}});
    FAIL() << "tools with a template that has none must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not support tools"), std::string::npos) << e.what();
  }
  nlohmann::json bad = msgs;
  bad[0]["content"] = nlohmann::json::parse(R"([{"type": "image_url", "image_url": {"url": "x"}}])");
  EXPECT_THROW(apply_chat_template(d.path().string(), bad, true), Error);

  // chat_template.jinja beside a tokenizer_config.json without one.
  write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  write("chat_template.jinja", "{{ messages[0].content }}{{ eos_token }}\n");
  EXPECT_EQ(apply_chat_template(d.path().string(), nlohmann::json::parse(R"([{"role": "user", "content": "x"}])"), false),
            "x</s>");
  fs::remove(d.path() / "chat_template.jinja");
  EXPECT_THROW(load_chat_template(d.path().string()), Error);
}

TEST(ChatTemplate, ApplyPassesContentPartsToTemplatesThatIterateThem) {
  mxtest::TempDir d;
  nlohmann::json cfg = {{"chat_template", template_file("zai-org-GLM-4.5.jinja")}, {"eos_token", "<|endoftext|>"}};
  std::ofstream(d.path() / "tokenizer_config.json") << cfg.dump();
  nlohmann::json msgs = nlohmann::json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "Hel"},
                                                  {"type": "text", "text": "lo"}]}])");
  EXPECT_EQ(apply_chat_template(d.path().string(), msgs, true), "[gMASK]<sop><|user|>\nHello<|assistant|>");
}
