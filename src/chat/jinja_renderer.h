#pragma once
// The state of one render: variable scopes, the output being written, and the
// limits that keep a hostile template bounded (output size, steps, macro call
// depth, range() length). Internal to the Jinja engine.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja_source.h"
#include "chat/jinja_value.h"

namespace mx::jinja {

struct Scope {
  Scope* parent = nullptr;
  std::vector<std::pair<std::string, Value>> vars;
  Value* find_local(std::string_view n) {
    for (auto& [k, v] : vars)
      if (k == n) return &v;
    return nullptr;
  }
  Value* find(std::string_view n) {
    for (Scope* s = this; s; s = s->parent)
      if (Value* v = s->find_local(n)) return v;
    return nullptr;
  }
  void set(const std::string& n, Value v) {
    if (Value* old = find_local(n)) *old = std::move(v);
    else vars.emplace_back(n, std::move(v));
  }
};

constexpr size_t kMaxOutput = size_t(64) << 20;
constexpr uint64_t kMaxSteps = 20'000'000;
constexpr int kMaxCallDepth = 100;
constexpr int64_t kMaxRange = 1'000'000;

struct Renderer {
  const std::string& src;
  std::string* out = nullptr;
  Scope* scope = nullptr;
  Scope* root = nullptr;
  int depth = 0;
  uint64_t steps = 0;

  [[noreturn]] void fail(size_t pos, const std::string& msg) const { fail_at(src, pos, msg); }
  void tick(size_t pos) {
    if (++steps > kMaxSteps) fail(pos, "the template runs too long (more than 20 million steps)");
  }
  void emit(std::string_view s, size_t pos) {
    out->append(s);
    if (out->size() > kMaxOutput) fail(pos, "the output is larger than 64 MiB");
  }
  [[noreturn]] void undefined(const Value& v, size_t pos) const {
    fail(pos, v.s.empty() ? std::string("a value is undefined") : fmt::format("'{}' is undefined", v.s));
  }
};

}  // namespace mx::jinja
