#pragma once
// Tool calling (OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`): which
// text format a model family writes its calls in, parsing the model's output
// into calls (whole, or incrementally for streaming), and the grammar that
// constrains decoding to calls when the client requires one.
//
// Formats, as each family's chat template renders an assistant message's
// tool_calls (data/chat_templates/) and as vLLM's tool parsers read them
// (vllm/entrypoints/openai/tool_parsers: hermes, glm4_moe, deepseekv3 /
// deepseekv31, llama3_json):
//   Hermes (Qwen2.5, Qwen3):  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//   Glm45 (GLM-4.5 / 4.6):    <tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>
//                             (v raw for strings, JSON otherwise: the template's `tojson if not string`)
//   DeepSeekV3:               <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//   DeepSeekV31 (V3.1+):      <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//   Llama3Json (Llama 3.x):   {"name": "f", "parameters": {...}}  (the whole answer; <|python_tag|> may precede it)
// Several Hermes / GLM calls follow one another, each in its own tags;
// DeepSeek's sit in one calls block. A call that does not parse (bad JSON, no
// name) stays in the content as text, as vLLM's parsers leave it.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace mx::server {

enum class ToolFormat { None, Hermes, Glm45, DeepSeekV3, DeepSeekV31, Llama3Json };

const char* tool_format_name(ToolFormat f);

// The format a chat template writes tool calls in, from its text (None: it
// renders no tool calls that we know).
ToolFormat detect_tool_format(const std::string& template_source);

// The format's tag strings. Families make some of them control tokens (GLM's
// <tool_call>, Llama's <|python_tag|>), which decode to nothing by default: a
// request with tools shows them in its text, so the parser sees them, and
// constrained decoding admits them.
std::vector<std::string> tool_markers(ToolFormat f);

// One call of function NAME written in the format, with ARGUMENTS standing
// for its JSON arguments (for the tools prompt of templates that write none).
std::string tool_call_example(ToolFormat f);

struct ToolFunction {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON Schema for the arguments object
};

enum class ToolChoice { None, Auto, Required, Named };

// A request's tools, validated (openai_api.cpp builds it).
struct ToolRequest {
  ToolFormat format = ToolFormat::None;
  std::vector<ToolFunction> functions;
  ToolChoice choice = ToolChoice::Auto;
  std::string named;     // the function tool_choice names (Named)
  bool parallel = true;  // parallel_tool_calls: several calls in one answer
  const ToolFunction* find(std::string_view name) const;
};

struct ToolCall {
  std::string name;
  std::string arguments;  // the arguments object as JSON text
};

// Splits output text into content and calls as it arrives. push returns the
// content that is safe to show: text that may still become a call (a partial
// tag, or a call without its end tag) is held back until it is known.
class ToolCallStream {
 public:
  explicit ToolCallStream(const ToolRequest& req);
  std::string push(std::string_view text, std::vector<ToolCall>& calls);
  // End of output: an unterminated call that parses is a call (the model may
  // stop right after its JSON), else its text is content.
  std::string finish(std::vector<ToolCall>& calls);

 private:
  bool parse_block(std::string_view block, bool terminated, std::vector<ToolCall>& calls) const;
  const ToolRequest& req_;
  std::string start_, end_;  // the tags around a block ("" for Llama3Json: the whole answer)
  std::string buf_;
  bool inside_ = false;
  int json_answer_ = -1;  // Llama3Json: -1 undecided, 1 the answer is a call, 0 plain text
};

struct ParsedOutput {
  std::string content;
  std::vector<ToolCall> calls;
};
ParsedOutput parse_tool_calls(const ToolRequest& req, std::string_view text);

// tool_choice "required" or a named function: output that is exactly one call
// (or, with parallel_tool_calls, one or more) of the allowed functions, in the
// request's format, with arguments valid for each function's parameter schema
// (grammar/json_schema.h; GLM's string values as raw text without '<').
// mx::Error for a schema the compiler cannot honour.
grammar::Grammar tool_call_grammar(const ToolRequest& req);

}  // namespace mx::server
