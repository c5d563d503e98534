#include "server/chat_prompt.h"

#include "core/error.h"

namespace mx::server {

using nlohmann::json;

std::string message_text(const json& content, size_t index) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return {};
  if (content.is_array()) {
    MX_CHECK(!content.empty(), "messages[{}].content is an empty array (give at least one part)", index);
    std::string text;
    for (size_t p = 0; p < content.size(); ++p) {
      const json& part = content[p];
      MX_CHECK(part.is_object() && part.contains("type") && part["type"].is_string(),
               "messages[{}].content[{}] must be an object with a \"type\"", index, p);
      const std::string type = part["type"].get<std::string>();
      MX_CHECK(type == "text", "messages[{}].content[{}]: content parts of type '{}' are not supported (text only)",
               index, p, type);
      MX_CHECK(part.contains("text") && part["text"].is_string(), "messages[{}].content[{}].text must be a string",
               index, p);
      text += part["text"].get<std::string>();
    }
    return text;
  }
  fail("messages[{}].content must be a string or an array of text parts", index);
}

std::string render_chat(const json& messages, const ChatTemplateOptions& opts) {
  MX_CHECK(messages.is_array(), "'messages' must be an array");
  MX_CHECK(!messages.empty(), "'messages' must contain at least one message");
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    MX_CHECK(m.is_object(), "messages[{}] must be an object", i);
    MX_CHECK(m.contains("role") && m["role"].is_string(), "messages[{}].role must be a string", i);
    const std::string role = m["role"].get<std::string>();
    MX_CHECK(role == "system" || role == "developer" || role == "user" || role == "assistant" || role == "tool",
             "messages[{}].role '{}' is not one of system, developer, user, assistant, tool", i, role);
    MX_CHECK(m.contains("content") || role == "assistant", "messages[{}] has no content", i);
    const json content = m.contains("content") ? m["content"] : json();
    MX_CHECK(!content.is_null() || role == "assistant", "messages[{}].content is null", i);
    MX_CHECK(!m.contains("name") || m["name"].is_null() || m["name"].is_string(), "messages[{}].name must be a string",
             i);
    out += role;
    out += ": ";
    out += message_text(content, i);
    out += '\n';
  }
  if (opts.add_generation_prompt) out += "assistant:";
  return out;
}

}  // namespace mx::server
