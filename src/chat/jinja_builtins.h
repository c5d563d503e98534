#pragma once
// What a template can call by name: filters (x | f), tests (x is t), the
// methods of str and dict, and the globals (range, namespace, dict,
// raise_exception, strftime_now), each as Jinja2's sandbox or transformers
// defines it. Filters and tests are resolved when the template is parsed, so an
// unknown name is a parse error. Internal to the Jinja engine.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "chat/jinja_renderer.h"
#include "chat/jinja_value.h"

namespace mx::jinja {

using FilterFn = Value (*)(Renderer&, const Value&, Args&, size_t);
using TestFn = bool (*)(Renderer&, const Value&, Args&, size_t);

FilterFn find_filter(const std::string& name);  // nullptr: unknown
TestFn find_test(const std::string& name);      // nullptr: unknown
const Value* find_global(const std::string& name);
// The test named `name` (unknown: an error), as select/reject run it.
bool run_test(Renderer& r, const std::string& name, const Value& v, Args& a, size_t pos);

// s.m(args) and obj.m(args) for a dict (items, keys, values, get).
Value str_method(Renderer& r, const std::string& s, const std::string& m, Args& a, size_t pos);
Value dict_method(Renderer& r, const Value& obj, const std::string& m, Args& a, size_t pos);

// Keyword-or-positional argument lookup for builtins.
struct ArgReader {
  Renderer& r;
  Args& a;
  size_t pos;
  const char* fn;
  std::vector<std::string> names;  // parameter names in order (after the implicit first)

  const Value* get(size_t idx) {
    const std::string& name = names[idx];
    const Value* found = idx < a.pos.size() ? &a.pos[idx] : nullptr;
    for (const auto& [k, v] : a.kw)
      if (k == name) {
        if (found) r.fail(pos, fmt::format("{}() got multiple values for argument '{}'", fn, name));
        found = &v;
      }
    return found;
  }
  void check() {
    if (a.pos.size() > names.size())
      r.fail(pos, fmt::format("{}() takes at most {} argument(s) ({} given)", fn, names.size(), a.pos.size()));
    for (const auto& [k, v] : a.kw)
      if (std::find(names.begin(), names.end(), k) == names.end())
        r.fail(pos, fmt::format("{}() got an unexpected keyword argument '{}'", fn, k));
  }
  std::string str(size_t idx, const std::string& def) {
    const Value* v = get(idx);
    if (!v || v->k == Value::Undef) return def;
    if (v->k != Value::Str) r.fail(pos, fmt::format("{}(): '{}' must be a string, not {}", fn, names[idx], type_name(*v)));
    return v->s;
  }
  int64_t integer(size_t idx, int64_t def) {
    const Value* v = get(idx);
    if (!v || v->k == Value::Undef || v->k == Value::None) return def;
    if (!v->integral()) r.fail(pos, fmt::format("{}(): '{}' must be an integer, not {}", fn, names[idx], type_name(*v)));
    return v->as_int();
  }
  bool flag(size_t idx, bool def) {
    const Value* v = get(idx);
    return v ? truthy(*v) : def;
  }
};

// v's text; an error naming `what` when v is not a string.
std::string need_str(Renderer& r, const Value& v, const char* what, size_t pos);

}  // namespace mx::jinja
