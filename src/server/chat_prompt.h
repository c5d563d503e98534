#pragma once
// Chat messages -> prompt text. Until chat templates (Jinja, from
// tokenizer_config.json) land, render_chat uses one fixed fallback format; a
// template renderer replaces the body of render_chat (chat_prompt.cpp) and
// keeps this signature.
//
// Fallback format, one role-tagged block per message, then the generation
// prompt:
//
//   <role>: <content>\n        for every message, in order
//   assistant:                  when add_generation_prompt
//
// Roles: system, developer, user, assistant, tool. Content: a string, null
// (only for assistant messages), or an array of {"type": "text", "text": ...}
// parts, joined without separator. Anything else (images, audio, unknown
// roles, missing fields) is an mx::Error naming the message.
// BOS is not written here: the tokenizer adds it when its config asks.
#include <nlohmann/json.hpp>
#include <string>

namespace mx::server {

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  // For template renderers (the fallback does not use them).
  std::string bos_token, eos_token;
  std::string chat_template;  // tokenizer_config.json "chat_template", if any
  std::string model_dir;      // the model directory ("" for a single-file model), for renderers that load it
};

std::string render_chat(const nlohmann::json& messages, const ChatTemplateOptions& opts = {});

// The text of one message's "content" (string, null or text parts); mx::Error otherwise.
std::string message_text(const nlohmann::json& content, size_t index);

}  // namespace mx::server
