#pragma once
// The values a chat template computes with, as Python sees them: None, bool,
// int, float, str, list/tuple, dict (string keys, insertion order), Jinja's
// namespace and Undefined, and callables (macros, globals); their str() / repr()
// text and Python's json.dumps, which is what transformers' tojson runs.
// Internal to the Jinja engine (chat/chat_template.h is the API).
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mx::jinja {

struct Value;
struct Dict;
struct Callable;
struct Renderer;
using List = std::vector<Value>;
using ListPtr = std::shared_ptr<List>;
using DictPtr = std::shared_ptr<Dict>;

struct Value {
  enum Kind : uint8_t { Undef, None, Bool, Int, Float, Str, Seq, Map, Ns, Func };
  Kind k = Undef;
  bool b = false;
  bool tuple = false;  // Seq: printed as a Python tuple
  int64_t i = 0;
  double f = 0;
  std::string s;  // Str; for Undef the name that was not defined
  ListPtr l;      // Seq
  DictPtr d;      // Map, Ns
  std::shared_ptr<Callable> fn;

  static Value of(Kind kind) {
    Value v;
    v.k = kind;
    return v;
  }
  static Value undef(std::string name = "") {
    Value v;  // k = Undef
    v.s = std::move(name);
    return v;
  }
  static Value none() { return of(None); }
  static Value boolean(bool x) { Value v = of(Bool); v.b = x; return v; }
  static Value integer(int64_t x) { Value v = of(Int); v.i = x; return v; }
  static Value real(double x) { Value v = of(Float); v.f = x; return v; }
  static Value str(std::string x) { Value v = of(Str); v.s = std::move(x); return v; }
  static Value list(List x = {}) { Value v = of(Seq); v.l = std::make_shared<List>(std::move(x)); return v; }
  static Value map(DictPtr p) { Value v = of(Map); v.d = std::move(p); return v; }

  bool numeric() const { return k == Int || k == Float || k == Bool; }
  bool integral() const { return k == Int || k == Bool; }
  int64_t as_int() const { return k == Bool ? int64_t(b) : i; }
  double as_double() const { return k == Float ? f : double(as_int()); }
};

struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const {
    for (const auto& [k, v] : items)
      if (k == key) return &v;
    return nullptr;
  }
  void set(const std::string& key, Value v) {
    for (auto& [k, old] : items)
      if (k == key) {
        old = std::move(v);
        return;
      }
    items.emplace_back(key, std::move(v));
  }
};

struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

struct Callable {
  virtual ~Callable() = default;
  virtual Value call(Renderer& r, Args& a, size_t pos) = 0;
  std::string name;
};

const char* type_name(const Value& v);  // Python's type name, for error messages
bool truthy(const Value& v);             // Python's bool(v)

// ---- Python-style text of values ----

// repr(float) / str(float): the shortest round-trip digits, in exponent form
// when the exponent is < -4 or >= 16.
std::string py_float(double x);
std::string py_repr_str(const std::string& s);  // repr(str)
std::string repr(const Value& v);
std::string to_str(const Value& v);  // str(v); Undefined prints as ""

// ---- Python json.dumps ----

struct JsonOpts {
  bool ensure_ascii = false;
  int indent = -1;  // < 0: none
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
};

// false: `v` (or something inside it) is not JSON serializable; its type in *bad.
bool dump_json(const Value& v, const JsonOpts& o, int level, std::string& out, std::string* bad);

// ---- json -> Value ----
// Objects keep the order the JSON iterates in (sorted for nlohmann::json,
// insertion order for ordered_json).
Value from_json(const nlohmann::json& j);
Value from_json(const nlohmann::ordered_json& j);

}  // namespace mx::jinja
