#pragma once
// Regular expression -> grammar (grammar/grammar.h) whose sentences are the
// texts the expression matches in full: the `regex` request field (sglang's
// spelling; vLLM's guided_regex) and JSON Schema's `pattern` keyword.
//
// Syntax (the ECMAScript subset that JSON Schema recommends, RFC 8259 / JSON
// Schema 2020-12 section 6.3.3, and that vLLM's and sglang's regex backends
// take): literals (UTF-8), '.', classes [...] and [^...] with ASCII members and
// ranges, escapes \d \w \s \D \W \S \n \r \t \f \v \uXXXX and escaped
// punctuation, groups (...) and (?:...), alternation |, quantifiers * + ? {m}
// {m,} {m,n} (lazy forms accepted: same language), '^' at the start and '$' at
// the end (the whole output is matched anyway). '.', a negated class and \D \W
// \S also match any non-ASCII character (well-formed UTF-8). Anything else
// (backreferences, lookaround, non-ASCII class members, counts over 1000) is
// an mx::Error naming it and its offset.
//
// json_string: the text is the inside of a JSON string literal whose value
// matches: '"' and '\' are written escaped, control characters never occur.
#include <string_view>

#include "grammar/grammar.h"

namespace mx::grammar {

uint32_t add_regex(Grammar& g, std::string_view pattern, bool json_string = false);
Grammar regex_grammar(std::string_view pattern);

}  // namespace mx::grammar
