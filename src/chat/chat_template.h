#pragma once
// Chat templates: the Jinja2 subset Hugging Face chat templates are written in,
// interpreted the way transformers' apply_chat_template renders them
// (ImmutableSandboxedEnvironment with trim_blocks + lstrip_blocks, loop controls,
// its tojson, raise_exception and strftime_now; keep_trailing_newline off).
// Enough for the real templates of Llama-3.x, Qwen2.5 / Qwen3, GLM-4.5 and
// DeepSeek-V3(.1) (data/chat_templates).
//
// Supported: {{ }}, {% %}, {# #}, whitespace control (-, +), if/elif/else,
// for (else, `if` filter, tuple targets, loop.index/index0/revindex/revindex0/
// first/last/length/previtem/nextitem), break/continue, set (names, tuples,
// ns.attr, set blocks), macro (defaults, keyword args), raw, generation;
// literals (strings, numbers, lists, tuples, dicts), ~ + - * / // % **,
// comparisons, and/or/not, in / not in, `x if c else y`, attribute, subscript,
// slices with negative indexes and steps; tests (defined, undefined, none,
// string, number, integer, float, boolean, true, false, mapping, iterable,
// sequence, callable, odd, even, divisibleby, eq/equalto/==, ne/!=, lt/<, le/<=,
// gt/>, ge/>=, in, lower, upper, sameas); filters (trim, tojson, length, count,
// default/d, string, lower, upper, capitalize, title, replace, join, items,
// first, last, list, reverse, sort, unique, map, select, reject, selectattr,
// rejectattr, int, float, abs, min, max, sum, indent, safe); str methods
// (startswith, endswith, strip/lstrip/rstrip, split/rsplit, splitlines, lower,
// upper, title, capitalize, replace, find, rfind, count, join, isdigit, isalpha,
// isspace, isalnum, islower, isupper), dict methods (items, keys, values, get);
// globals range, namespace, dict, raise_exception, strftime_now.
//
// Anything else (extends/include/import/block/call/filter/with blocks, other
// filters, tests or methods, *args, str.format, the % operator on strings) is an
// mx::Error naming it and its line and column, at parse time where the syntax
// shows it, otherwise when rendering reaches it. Dict keys are strings; dicts
// keep their order (a nlohmann::json context arrives sorted by key, an
// ordered_json one in insertion order, which is what tojson then prints).
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace mx {

class ChatTemplate {
 public:
  // Parses a template; syntax errors are an mx::Error with line and column.
  static ChatTemplate parse(std::string_view src);

  // Renders with the context's top-level keys as variables (messages,
  // add_generation_prompt, bos_token, eos_token, tools, ...).
  std::string render(const nlohmann::json& context) const;
  std::string render(const nlohmann::ordered_json& context) const;

  // Whether the template reads the variable `name` anywhere (e.g. "tools").
  bool uses_variable(std::string_view name) const;
  // Whether the template loops over a message's content itself (content given
  // as a list of parts, as GLM-4.5's and multimodal templates do).
  bool iterates_content() const;

  const std::string& source() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

// A model directory's chat template: tokenizer_config.json's chat_template (a
// string, or a list of {name, template} from which "default" is taken), else
// chat_template.jinja beside it; and the special tokens the template sees.
struct ModelChatTemplate {
  ChatTemplate tmpl;
  nlohmann::ordered_json special_tokens;  // bos_token, eos_token, unk_token, pad_token: strings
};
ModelChatTemplate load_chat_template(const std::string& model_dir);
// Whether model_dir has a chat template (tokenizer_config.json's chat_template
// or chat_template.jinja); load_chat_template fails when it has none.
bool has_chat_template(const std::string& model_dir);

// Renders `messages` (role + content, content a string or a list of
// {"type": "text", "text": ...} parts) with the model's chat template, as
// transformers' apply_chat_template(messages, tokenize=False,
// add_generation_prompt=...) does. A list of text parts is passed through to a
// template that iterates over content, else joined with "\n" (vLLM's rule).
std::string apply_chat_template(const std::string& model_dir, const nlohmann::json& messages,
                                bool add_generation_prompt);
// The same with extra template variables (tools, enable_thinking, date_string,
// ...), in insertion order. Non-empty tools with a template that never reads
// `tools` is an mx::Error.
std::string apply_chat_template(const std::string& model_dir, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const nlohmann::ordered_json& extra_context);
// With a template loaded before (a server loads it once, at startup); its
// errors name no file.
std::string apply_chat_template(const ModelChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const nlohmann::ordered_json& extra_context = {});

}  // namespace mx
