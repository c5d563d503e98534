#pragma once
// Positions in a template's source: "line L, column C" for error messages, and
// the mx::Error every lexer, parser and render error becomes.
// Internal to the Jinja engine.
#include <algorithm>
#include <string>

#include "core/error.h"

namespace mx::jinja {

inline std::string where(const std::string& src, size_t pos) {
  pos = std::min(pos, src.size());
  size_t line = 1 + size_t(std::count(src.begin(), src.begin() + long(pos), '\n'));
  size_t nl = pos == 0 ? std::string::npos : src.rfind('\n', pos - 1);
  size_t col = nl == std::string::npos ? pos + 1 : pos - nl;
  return fmt::format("line {}, column {}", line, col);
}

[[noreturn]] inline void fail_at(const std::string& src, size_t pos, const std::string& msg) {
  fail("chat template: {} (at {})", msg, where(src, pos));
}

}  // namespace mx::jinja
