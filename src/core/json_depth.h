#pragma once
// How deep JSON text nests, found by a scan rather than by parsing. nlohmann's parser
// takes any depth, but copying or dumping a parsed value recurses once per level: a
// 200 KB request body of 100,000 '[' overflowed a server thread's stack (SIGSEGV).
// Text that nests deeper than a caller's limit is refused before it is parsed.
#include <string_view>

namespace mx {

// Deeper than any real request or tool call; far below what the recursion survives
// (50,000 levels did, on a server thread).
constexpr int kMaxJsonDepth = 512;

// Whether the arrays and objects of `text` nest at most max_depth deep. Brackets inside
// strings do not count (escapes honoured); malformed text is left to the parser.
inline bool json_depth_at_most(std::string_view text, int max_depth = kMaxJsonDepth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

}  // namespace mx
