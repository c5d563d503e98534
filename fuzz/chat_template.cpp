// libFuzzer target: a Jinja chat template (tokenizer_config.json's chat_template)
// parsed and rendered with a conversation, as apply_chat_template does.
#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "chat/chat_template.h"

MXFUZZ_TARGET(chat_template) {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": "Hi <b>there</b>"},
                 {"role": "assistant", "content": "Hello.", "tool_calls": [{"type": "function",
                   "function": {"name": "f", "arguments": {"x": 1}}}]},
                 {"role": "tool", "content": "42"},
                 {"role": "user", "content": [{"type": "text", "text": "and?"}]}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]})");
  mxfuzz::refusal_ok([&] {
    const mx::ChatTemplate t = mx::ChatTemplate::parse(mxfuzz::as_string(data, size));
    (void)t.uses_variable("tools");
    (void)t.render(context);
  });
  return 0;
}
