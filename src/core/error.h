#pragma once
// One exception type for every user-facing failure (bad file, bad config, bad flag).
// Callers at the edge (CLI, server) print what() and exit non-zero / answer 4xx.
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace mx {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

template <typename... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

#define MX_CHECK(cond, ...)                 \
  do {                                      \
    if (!(cond)) ::mx::fail(__VA_ARGS__);   \
  } while (0)

}  // namespace mx
