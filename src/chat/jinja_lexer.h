#pragma once
// The lexer: template text to tokens, with Jinja2's whitespace control as
// transformers configures it (trim_blocks: the newline after a block tag goes;
// lstrip_blocks: spaces before a block tag on its line go; "-" strips all
// whitespace on that side, "+" keeps it), comments dropped and {% raw %}
// bodies kept verbatim. Internal to the Jinja engine.
#include <cstdint>
#include <string>
#include <vector>

namespace mx::jinja {

enum class T : uint8_t { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, Int, Float, Str, Op, Eof };
struct Tok {
  T t;
  std::string s;
  int64_t i = 0;
  double f = 0;
  size_t pos = 0;
};

// Unclosed tags, comments, strings and raw blocks, and unbalanced brackets are
// an mx::Error with the position.
std::vector<Tok> lex(const std::string& src);

}  // namespace mx::jinja
