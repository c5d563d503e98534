#pragma once
// The request side of tool calling (server/tool_calls.h has the formats): the
// chat request's tools / tool_choice / parallel_tool_calls validated, the
// messages' earlier calls shaped for the template, the prompt for templates that
// never read `tools`, and the constraint for tool_choice required / named.
// Errors are ApiError 400s naming the field (openai_api.h).
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "grammar/token_mask.h"
#include "server/tool_calls.h"

namespace mx::server {

class StructuredOutputs;

// Null when the body has no tools (or an empty list). format: the template's.
// A tool_choice other than "none" with a template of no known format is a 400.
// The body keeps its members' order: GLM's arguments follow a schema's properties.
std::shared_ptr<ToolRequest> parse_tools(const nlohmann::ordered_json& body, ToolFormat format);

// The messages with each assistant tool call validated ({"id", "type":
// "function", "function": {"name", "arguments"}}) and its arguments as the
// template reads them: an object (Hermes, GLM and Llama templates iterate or
// tojson it) or JSON text (DeepSeek's concatenate it).
nlohmann::ordered_json tool_messages(const nlohmann::json& messages, ToolFormat format);

// A system message describing the tools and the call format, for a template
// that never reads `tools` (DeepSeek-V3's original template), merged into the
// first system message or put first.
nlohmann::ordered_json with_tools_system_prompt(const nlohmann::ordered_json& messages, const ToolRequest& req,
                                                const nlohmann::ordered_json& tools);

// tool_choice required / named: the grammar its answers are held to (cached per tools and choice).
std::shared_ptr<grammar::GrammarMasks> tool_choice_grammar(StructuredOutputs& so, const ToolRequest& req);

}  // namespace mx::server
