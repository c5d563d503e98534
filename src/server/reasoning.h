#pragma once
// Reasoning content: a thinking model's "<think> ... </think>" returned as
// message.reasoning_content (delta.reasoning_content when streamed), the rest as
// content, as vLLM's reasoning parsers (qwen3, deepseek_r1, glm45) and sglang do.
// On for chat requests to a model whose chat template mentions "</think>"
// (Qwen3, GLM-4.5, DeepSeek-R1-style); chat_template_kwargs (e.g.
// {"enable_thinking": false}) reach the template.
//
// The split is incremental, for streaming: text arrives in pieces, and a piece
// that may be the start of a tag is held back until it is known. The output is
// reasoning first when it starts with "<think>" (leading whitespace allowed) or
// when the prompt already opened it (DeepSeek-R1's and GLM-4.5's templates end the
// generation prompt with "<think>"); reasoning then lasts until "</think>", and
// the newlines right after it are dropped. An output that never closes its
// reasoning is all reasoning.
#include <string>
#include <string_view>

namespace mx::server {

class ReasoningSplitter {
 public:
  // in_reasoning: the prompt ends inside an open "<think>".
  explicit ReasoningSplitter(bool in_reasoning) : state_(in_reasoning ? Reasoning : Start) {}
  // Splits more output text; appends to reasoning and content what is settled.
  void push(std::string_view text, std::string& reasoning, std::string& content);
  // The end of the output: whatever was held back.
  void finish(std::string& reasoning, std::string& content);

  // Whether a rendered prompt ends inside an open "<think>" (whitespace after it allowed).
  static bool prompt_opens_reasoning(std::string_view prompt);

 private:
  enum State { Start, Reasoning, AfterReasoning, Content };
  State state_;
  std::string held_;  // text that may still turn out to be (part of) a tag
};

}  // namespace mx::server
