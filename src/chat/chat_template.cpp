#include "chat/chat_template.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/unicode.h"

namespace fs = std::filesystem;

namespace mx {

namespace {

// ============================================================================
// Values
// ============================================================================

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

  static Value undef(std::string name = "") {
    Value v;
    v.s = std::move(name);
    return v;
  }
  static Value none() {
    Value v;
    v.k = None;
    return v;
  }
  static Value boolean(bool x) {
    Value v;
    v.k = Bool;
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v;
    v.k = Int;
    v.i = x;
    return v;
  }
  static Value real(double x) {
    Value v;
    v.k = Float;
    v.f = x;
    return v;
  }
  static Value str(std::string x) {
    Value v;
    v.k = Str;
    v.s = std::move(x);
    return v;
  }
  static Value list(List x = {}) {
    Value v;
    v.k = Seq;
    v.l = std::make_shared<List>(std::move(x));
    return v;
  }
  static Value map(DictPtr p) {
    Value v;
    v.k = Map;
    v.d = std::move(p);
    return v;
  }

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

const char* type_name(const Value& v) {
  switch (v.k) {
    case Value::Undef: return "Undefined";
    case Value::None: return "NoneType";
    case Value::Bool: return "bool";
    case Value::Int: return "int";
    case Value::Float: return "float";
    case Value::Str: return "str";
    case Value::Seq: return "list";
    case Value::Map: return "dict";
    case Value::Ns: return "Namespace";
    case Value::Func: return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.k) {
    case Value::Undef: case Value::None: return false;
    case Value::Bool: return v.b;
    case Value::Int: return v.i != 0;
    case Value::Float: return v.f != 0;
    case Value::Str: return !v.s.empty();
    case Value::Seq: return !v.l->empty();
    case Value::Map: return !v.d->items.empty();
    case Value::Ns: case Value::Func: return true;
  }
  return false;
}

// ---- Python-style text of values ----

// repr(float) / str(float): the shortest round-trip digits, in exponent form
// when the exponent is < -4 or >= 16.
std::string py_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // d.ddde[+-]XX
  size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  int exp = std::stoi(sci.substr(e + 1));
  bool neg = !mant.empty() && mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
  } else if (exp < 0) {
    out += "0." + std::string(size_t(-exp - 1), '0') + digits;
  } else {
    if (digits.size() <= size_t(exp) + 1) {
      out += digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
    }
  }
  return out;
}

std::string py_repr_str(const std::string& s) {
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == uint8_t(q)) out += std::string("\\") + q;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += char(c);
  }
  out += q;
  return out;
}

std::string to_str(const Value& v);

std::string repr(const Value& v) {
  switch (v.k) {
    case Value::Str: return py_repr_str(v.s);
    case Value::Undef: return "Undefined";
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.k) {
    case Value::Undef: return "";
    case Value::None: return "None";
    case Value::Bool: return v.b ? "True" : "False";
    case Value::Int: return std::to_string(v.i);
    case Value::Float: return py_float(v.f);
    case Value::Str: return v.s;
    case Value::Seq: {
      std::string s = v.tuple ? "(" : "[";
      for (size_t i = 0; i < v.l->size(); ++i) s += (i ? ", " : "") + repr((*v.l)[i]);
      if (v.tuple && v.l->size() == 1) s += ",";
      return s + (v.tuple ? ")" : "]");
    }
    case Value::Map: case Value::Ns: {
      std::string s = v.k == Value::Ns ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, x] : v.d->items) {
        s += (first ? "" : ", ") + py_repr_str(k) + ": " + repr(x);
        first = false;
      }
      return s + (v.k == Value::Ns ? "}>" : "}");
    }
    case Value::Func: return "<function " + (v.fn ? v.fn->name : std::string()) + ">";
  }
  return "";
}

// ---- Python json.dumps ----

void json_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    unsigned char c = uint8_t(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20) out += fmt::format("\\u{:04x}", c);
          else out += char(c);
      }
      ++i;
      continue;
    }
    size_t len = std::min(unicode::utf8_len(c), s.size() - i);
    if (!ensure_ascii) {
      out.append(s, i, len);
      i += len;
      continue;
    }
    std::vector<uint32_t> cps = unicode::decode_utf8(std::string_view(s).substr(i, len));
    uint32_t cp = cps.empty() ? unicode::kReplacement : cps[0];
    if (cps.size() != 1) {
      cp = unicode::kReplacement;
      len = 1;
    }
    if (cp >= 0x10000) {
      uint32_t v = cp - 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
    } else {
      out += fmt::format("\\u{:04x}", cp);
    }
    i += len;
  }
  out += '"';
}

struct JsonOpts {
  bool ensure_ascii = false;
  int indent = -1;  // < 0: none
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
};

// false: `v` (or something inside it) is not JSON serializable; its type in *bad.
bool dump_json(const Value& v, const JsonOpts& o, int level, std::string& out, std::string* bad) {
  auto newline = [&](int lvl) {
    if (o.indent >= 0) {
      out += '\n';
      out.append(size_t(o.indent) * size_t(lvl), ' ');
    }
  };
  switch (v.k) {
    case Value::None: out += "null"; return true;
    case Value::Bool: out += v.b ? "true" : "false"; return true;
    case Value::Int: out += std::to_string(v.i); return true;
    case Value::Float:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f < 0 ? "-Infinity" : "Infinity";
      else out += py_float(v.f);
      return true;
    case Value::Str: json_string(v.s, o.ensure_ascii, out); return true;
    case Value::Seq: {
      if (v.l->empty()) {
        out += "[]";
        return true;
      }
      out += '[';
      for (size_t i = 0; i < v.l->size(); ++i) {
        if (i) out += o.item_sep;
        newline(level + 1);
        if (!dump_json((*v.l)[i], o, level + 1, out, bad)) return false;
      }
      newline(level);
      out += ']';
      return true;
    }
    case Value::Map: {
      if (v.d->items.empty()) {
        out += "{}";
        return true;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.d->items) items.push_back(&kv);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep;
        newline(level + 1);
        json_string(items[i]->first, o.ensure_ascii, out);
        out += o.key_sep;
        if (!dump_json(items[i]->second, o, level + 1, out, bad)) return false;
      }
      newline(level);
      out += '}';
      return true;
    }
    default:
      *bad = type_name(v);
      return false;
  }
}

// ---- json <-> Value ----

template <class J>
Value from_json(const J& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      return u > uint64_t(INT64_MAX) ? Value::real(double(u)) : Value::integer(int64_t(u));
    }
    case nlohmann::json::value_t::number_float: return Value::real(j.template get<double>());
    case nlohmann::json::value_t::string: return Value::str(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& e : j) l.push_back(from_json(e));
      return Value::list(std::move(l));
    }
    case nlohmann::json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (auto it = j.begin(); it != j.end(); ++it) d->items.emplace_back(it.key(), from_json(it.value()));
      return Value::map(d);
    }
    default: fail("chat template: binary JSON values are not supported");
  }
}

// ---- strings as Python sees them (code points) ----

bool ascii(const std::string& s) {
  for (char c : s)
    if (uint8_t(c) >= 0x80) return false;
  return true;
}
std::vector<uint32_t> cps_of(const std::string& s) { return unicode::decode_utf8(s); }
std::string str_of(const std::vector<uint32_t>& c, size_t b, size_t e) {
  return b >= e ? std::string() : unicode::encode_utf8(c.data() + b, e - b);
}
size_t py_len(const std::string& s) { return ascii(s) ? s.size() : cps_of(s).size(); }
bool py_space(uint32_t cp) { return unicode::is_whitespace(cp) || (cp >= 0x1c && cp <= 0x1f); }

std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::vector<uint32_t> c = cps_of(s);
  std::vector<uint32_t> set;
  bool ws = !chars || chars->k == Value::None || chars->k == Value::Undef;
  if (!ws) set = cps_of(chars->s);
  auto strip_me = [&](uint32_t cp) {
    return ws ? py_space(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t b = 0, e = c.size();
  if (left)
    while (b < e && strip_me(c[b])) ++b;
  if (right)
    while (e > b && strip_me(c[e - 1])) --e;
  return str_of(c, b, e);
}

std::vector<std::string> py_split(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (!sep || sep->k == Value::None || sep->k == Value::Undef) {
    std::vector<uint32_t> c = cps_of(s);
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < c.size()) {
      while (i < c.size() && py_space(c[i])) ++i;
      if (i >= c.size()) break;
      size_t b = i;
      while (i < c.size() && !py_space(c[i])) ++i;
      words.emplace_back(b, i);
    }
    if (maxsplit < 0 || size_t(maxsplit) >= words.size() || words.empty()) {
      for (auto [b, e] : words) out.push_back(str_of(c, b, e));
      return out;
    }
    // With a limit the remainder keeps its inner whitespace (trailing/leading stripped).
    if (!from_right) {
      for (size_t w = 0; w < size_t(maxsplit); ++w) out.push_back(str_of(c, words[w].first, words[w].second));
      out.push_back(str_of(c, words[size_t(maxsplit)].first, words.back().second));
    } else {
      size_t keep = words.size() - size_t(maxsplit);
      out.push_back(str_of(c, words[0].first, words[keep - 1].second));
      for (size_t w = keep; w < words.size(); ++w) out.push_back(str_of(c, words[w].first, words[w].second));
    }
    return out;
  }
  const std::string& d = sep->s;
  if (!from_right) {
    size_t pos = 0;
    int64_t n = 0;
    while (maxsplit < 0 || n < maxsplit) {
      size_t m = s.find(d, pos);
      if (m == std::string::npos) break;
      out.push_back(s.substr(pos, m - pos));
      pos = m + d.size();
      ++n;
    }
    out.push_back(s.substr(pos));
  } else {
    size_t end = s.size();
    int64_t n = 0;
    std::vector<std::string> rev;
    while (maxsplit < 0 || n < maxsplit) {
      if (end < d.size()) break;
      size_t m = s.rfind(d, end - d.size());
      if (m == std::string::npos) break;
      rev.push_back(s.substr(m + d.size(), end - m - d.size()));
      end = m;
      ++n;
    }
    rev.push_back(s.substr(0, end));
    out.assign(rev.rbegin(), rev.rend());
  }
  return out;
}

std::string py_lower(const std::string& s) {
  if (ascii(s)) {
    std::string o = s;
    for (char& c : o)
      if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    return o;
  }
  std::vector<uint32_t> c = cps_of(s);
  for (uint32_t& cp : c) cp = unicode::to_lower(cp);
  return str_of(c, 0, c.size());
}
std::string py_upper(const std::string& s) {  // ASCII letters only
  std::string o = s;
  for (char& c : o)
    if (c >= 'a' && c <= 'z') c = char(c - 'a' + 'A');
  return o;
}
bool is_ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
std::string py_title(const std::string& s) {
  std::string o = s;
  bool prev_cased = false;
  for (char& c : o) {
    if (is_ascii_alpha(c)) {
      c = prev_cased ? char(std::tolower(uint8_t(c))) : char(std::toupper(uint8_t(c)));
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return o;
}
std::string py_capitalize(const std::string& s) {
  std::string o = py_lower(s);
  if (!o.empty() && o[0] >= 'a' && o[0] <= 'z') o[0] = char(o[0] - 'a' + 'A');
  return o;
}
std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every code point
    std::vector<uint32_t> c = cps_of(s);
    int64_t n = 0;
    for (size_t i = 0; i <= c.size(); ++i) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      if (i < c.size()) unicode::append_utf8(out, c[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t m = s.find(from, pos);
    if (m == std::string::npos) break;
    out.append(s, pos, m - pos);
    out += to;
    pos = m + from.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

// Python slice.indices().
void slice_indices(int64_t len, const Value& a, const Value& b, const Value& c, int64_t& start, int64_t& stop,
                   int64_t& step) {
  auto given = [](const Value& v) { return v.k != Value::None && v.k != Value::Undef; };
  step = given(c) ? c.as_int() : 1;
  if (given(a)) {
    start = a.as_int();
    if (start < 0) start += len;
    if (start < 0) start = step < 0 ? -1 : 0;
    if (start >= len) start = step < 0 ? len - 1 : len;
  } else {
    start = step < 0 ? len - 1 : 0;
  }
  if (given(b)) {
    stop = b.as_int();
    if (stop < 0) stop += len;
    if (stop < 0) stop = step < 0 ? -1 : 0;
    if (stop >= len) stop = step < 0 ? len - 1 : len;
  } else {
    stop = step < 0 ? -1 : len;
  }
}

// ============================================================================
// Rendering state
// ============================================================================

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
constexpr int kMaxParseDepth = 200;
constexpr int64_t kMaxRange = 1'000'000;

std::string where(const std::string& src, size_t pos) {
  pos = std::min(pos, src.size());
  size_t line = 1 + size_t(std::count(src.begin(), src.begin() + long(pos), '\n'));
  size_t nl = pos == 0 ? std::string::npos : src.rfind('\n', pos - 1);
  size_t col = nl == std::string::npos ? pos + 1 : pos - nl;
  return fmt::format("line {}, column {}", line, col);
}

[[noreturn]] void fail_at(const std::string& src, size_t pos, const std::string& msg) {
  fail("chat template: {} (at {})", msg, where(src, pos));
}

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

// ============================================================================
// Operations
// ============================================================================

bool equals(const Value& a, const Value& b) {
  if (a.numeric() && b.numeric()) {
    if (a.integral() && b.integral()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.k != b.k) return false;
  switch (a.k) {
    case Value::Undef: case Value::None: return true;
    case Value::Str: return a.s == b.s;
    case Value::Seq: {
      if (a.l->size() != b.l->size()) return false;
      for (size_t i = 0; i < a.l->size(); ++i)
        if (!equals((*a.l)[i], (*b.l)[i])) return false;
      return true;
    }
    case Value::Map: case Value::Ns: {
      if (a.d == b.d) return true;
      if (a.k == Value::Ns || a.d->items.size() != b.d->items.size()) return false;
      for (const auto& [k, v] : a.d->items) {
        const Value* o = b.d->find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case Value::Func: return a.fn == b.fn;
    default: return false;
  }
}

// <0, 0, >0; TypeError for unordered types.
int compare(Renderer& r, const Value& a, const Value& b, size_t pos) {
  if (a.k == Value::Undef) r.undefined(a, pos);
  if (b.k == Value::Undef) r.undefined(b, pos);
  if (a.numeric() && b.numeric()) {
    if (a.integral() && b.integral()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y;
  }
  if (a.k == Value::Str && b.k == Value::Str) return a.s < b.s ? -1 : a.s > b.s;  // UTF-8 order = code point order
  if (a.k == Value::Seq && b.k == Value::Seq) {
    for (size_t i = 0; i < a.l->size() && i < b.l->size(); ++i) {
      if (equals((*a.l)[i], (*b.l)[i])) continue;
      return compare(r, (*a.l)[i], (*b.l)[i], pos);
    }
    return a.l->size() < b.l->size() ? -1 : a.l->size() > b.l->size();
  }
  r.fail(pos, fmt::format("'<' is not supported between '{}' and '{}'", type_name(a), type_name(b)));
}

bool contains(Renderer& r, const Value& needle, const Value& hay, size_t pos) {
  switch (hay.k) {
    case Value::Str:
      if (needle.k != Value::Str)
        r.fail(pos, fmt::format("'in <string>' requires a string as left operand, not {}", type_name(needle)));
      return hay.s.find(needle.s) != std::string::npos;
    case Value::Seq:
      for (const Value& e : *hay.l)
        if (equals(e, needle)) return true;
      return false;
    case Value::Map: case Value::Ns: return needle.k == Value::Str && hay.d->find(needle.s) != nullptr;
    case Value::Undef: return false;  // an undefined value iterates as empty
    default: r.fail(pos, fmt::format("argument of type '{}' is not iterable", type_name(hay)));
  }
}

// What `for` iterates: list items, dict keys, string characters.
List iterate(Renderer& r, const Value& v, size_t pos) {
  switch (v.k) {
    case Value::Undef: return {};
    case Value::Seq: return *v.l;
    case Value::Map: {
      List l;
      for (const auto& [k, x] : v.d->items) l.push_back(Value::str(k));
      return l;
    }
    case Value::Str: {
      List l;
      std::vector<uint32_t> c = cps_of(v.s);
      for (size_t i = 0; i < c.size(); ++i) l.push_back(Value::str(str_of(c, i, i + 1)));
      return l;
    }
    default: r.fail(pos, fmt::format("'{}' object is not iterable", type_name(v)));
  }
}

template <class Op>
int64_t checked(Renderer& r, Op op, int64_t a, int64_t b, size_t pos) {
  int64_t v = 0;
  if (op(a, b, &v)) r.fail(pos, "integer overflow");
  return v;
}
bool add_ovf(int64_t a, int64_t b, int64_t* v) { return __builtin_add_overflow(a, b, v); }
bool sub_ovf(int64_t a, int64_t b, int64_t* v) { return __builtin_sub_overflow(a, b, v); }
bool mul_ovf(int64_t a, int64_t b, int64_t* v) { return __builtin_mul_overflow(a, b, v); }

Value binary(Renderer& r, const std::string& op, const Value& a, const Value& b, size_t pos) {
  if (op == "~") return Value::str(to_str(a) + to_str(b));
  if (a.k == Value::Undef) r.undefined(a, pos);
  if (b.k == Value::Undef) r.undefined(b, pos);
  auto bad = [&]() -> Value {
    r.fail(pos, fmt::format("unsupported operand types for {}: '{}' and '{}'", op, type_name(a), type_name(b)));
  };
  if (op == "+") {
    if (a.k == Value::Str && b.k == Value::Str) return Value::str(a.s + b.s);
    if (a.k == Value::Seq && b.k == Value::Seq) {
      List l = *a.l;
      l.insert(l.end(), b.l->begin(), b.l->end());
      return Value::list(std::move(l));
    }
    if (a.numeric() && b.numeric()) {
      if (a.integral() && b.integral()) {
        return Value::integer(checked(r, add_ovf, a.as_int(), b.as_int(), pos));
      }
      return Value::real(a.as_double() + b.as_double());
    }
    if (a.k == Value::Str || b.k == Value::Str)
      r.fail(pos, fmt::format("can only concatenate str (not \"{}\") to str",
                              type_name(a.k == Value::Str ? b : a)));
    return bad();
  }
  if (op == "-") {
    if (!a.numeric() || !b.numeric()) return bad();
    if (a.integral() && b.integral()) {
      return Value::integer(checked(r, sub_ovf, a.as_int(), b.as_int(), pos));
    }
    return Value::real(a.as_double() - b.as_double());
  }
  if (op == "*") {
    if (a.numeric() && b.numeric()) {
      if (a.integral() && b.integral()) {
        return Value::integer(checked(r, mul_ovf, a.as_int(), b.as_int(), pos));
      }
      return Value::real(a.as_double() * b.as_double());
    }
    const Value* seq = a.integral() ? &b : &a;
    const Value* n = a.integral() ? &a : &b;
    if (!n->integral() || (seq->k != Value::Str && seq->k != Value::Seq)) return bad();
    int64_t times = std::max<int64_t>(0, n->as_int());
    size_t unit = seq->k == Value::Str ? seq->s.size() : seq->l->size();
    if (unit && uint64_t(times) * unit > kMaxOutput) r.fail(pos, "repetition result is too large");
    if (seq->k == Value::Str) {
      std::string s;
      for (int64_t i = 0; i < times; ++i) s += seq->s;
      return Value::str(std::move(s));
    }
    List l;
    for (int64_t i = 0; i < times; ++i) l.insert(l.end(), seq->l->begin(), seq->l->end());
    return Value::list(std::move(l));
  }
  if (op == "/") {
    if (!a.numeric() || !b.numeric()) return bad();
    if (b.as_double() == 0) r.fail(pos, "division by zero");
    return Value::real(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (a.k == Value::Str && op == "%") r.fail(pos, "string formatting with % is not supported");
    if (!a.numeric() || !b.numeric()) return bad();
    if (a.integral() && b.integral()) {
      int64_t x = a.as_int(), y = b.as_int();
      if (y == 0) r.fail(pos, "integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) r.fail(pos, "integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::integer(op == "//" ? q : m);
    }
    double x = a.as_double(), y = b.as_double();
    if (y == 0) r.fail(pos, "float division or modulo by zero");
    double q = std::floor(x / y);
    return Value::real(op == "//" ? q : x - q * y);
  }
  if (op == "**") {
    if (!a.numeric() || !b.numeric()) return bad();
    if (a.integral() && b.integral() && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), v = 1;
      while (e-- > 0) v = checked(r, mul_ovf, v, base, pos);
      return Value::integer(v);
    }
    return Value::real(std::pow(a.as_double(), b.as_double()));
  }
  r.fail(pos, fmt::format("unknown operator '{}'", op));
}

Value get_attr(Renderer& r, const Value& obj, const std::string& name, size_t pos) {
  switch (obj.k) {
    case Value::Undef: r.undefined(obj, pos);
    case Value::Map: case Value::Ns: {
      if (const Value* v = obj.d->find(name)) return *v;
      return Value::undef(name);
    }
    default: return Value::undef(name);
  }
}

Value get_item(Renderer& r, const Value& obj, const Value& key, size_t pos) {
  switch (obj.k) {
    case Value::Undef: r.undefined(obj, pos);
    case Value::Seq: {
      if (!key.integral()) {
        if (key.k == Value::Str) return Value::undef(key.s);
        r.fail(pos, fmt::format("list indices must be integers, not {}", type_name(key)));
      }
      int64_t i = key.as_int(), n = int64_t(obj.l->size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undef();
      return (*obj.l)[size_t(i)];
    }
    case Value::Str: {
      if (!key.integral()) return Value::undef();
      std::vector<uint32_t> c = cps_of(obj.s);
      int64_t i = key.as_int(), n = int64_t(c.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undef();
      return Value::str(str_of(c, size_t(i), size_t(i) + 1));
    }
    case Value::Map: case Value::Ns: {
      if (key.k != Value::Str) return Value::undef(to_str(key));
      if (const Value* v = obj.d->find(key.s)) return *v;
      return Value::undef(key.s);
    }
    default: return Value::undef();
  }
}

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

std::string need_str(Renderer& r, const Value& v, const char* what, size_t pos) {
  if (v.k == Value::Undef) r.undefined(v, pos);
  if (v.k != Value::Str) r.fail(pos, fmt::format("{} needs a string, not {}", what, type_name(v)));
  return v.s;
}

Value py_str_list(const std::vector<std::string>& parts) {
  List l;
  for (const auto& p : parts) l.push_back(Value::str(p));
  return Value::list(std::move(l));
}

bool starts_or_ends(Renderer& r, const std::string& s, const Value& arg, bool start, size_t pos) {
  auto one = [&](const Value& p) {
    std::string x = need_str(r, p, start ? "startswith()" : "endswith()", pos);
    return start ? s.compare(0, x.size(), x) == 0 && s.size() >= x.size()
                 : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (arg.k == Value::Seq) {
    for (const Value& p : *arg.l)
      if (one(p)) return true;
    return false;
  }
  return one(arg);
}

Value str_method(Renderer& r, const std::string& s, const std::string& m, Args& a, size_t pos) {
  auto reader = [&](std::vector<std::string> names) { return ArgReader{r, a, pos, m.c_str(), std::move(names)}; };
  if (m == "startswith" || m == "endswith") {
    auto ar = reader({"prefix", "start", "end"});
    ar.check();
    if (a.pos.size() > 1 || ar.get(1) || ar.get(2)) r.fail(pos, fmt::format("str.{}() with start/end is not supported", m));
    const Value* p = ar.get(0);
    if (!p) r.fail(pos, fmt::format("str.{}() takes one argument", m));
    return Value::boolean(starts_or_ends(r, s, *p, m == "startswith", pos));
  }
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    auto ar = reader({"chars"});
    ar.check();
    const Value* c = ar.get(0);
    if (c && c->k != Value::Str && c->k != Value::None) r.fail(pos, fmt::format("str.{}() arg must be a string or None", m));
    return Value::str(py_strip(s, c, m != "rstrip", m != "lstrip"));
  }
  if (m == "split" || m == "rsplit") {
    auto ar = reader({"sep", "maxsplit"});
    ar.check();
    const Value* sep = ar.get(0);
    if (sep && sep->k != Value::Str && sep->k != Value::None) r.fail(pos, fmt::format("str.{}(): sep must be a string or None", m));
    if (sep && sep->k == Value::Str && sep->s.empty()) r.fail(pos, "empty separator");
    return py_str_list(py_split(s, sep, ar.integer(1, -1), m == "rsplit"));
  }
  if (m == "splitlines") {
    auto ar = reader({"keepends"});
    ar.check();
    bool keep = ar.flag(0, false);
    std::vector<std::string> lines;
    size_t b = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        size_t e = i;
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        lines.push_back(s.substr(b, (keep ? i + 1 : e) - b));
        b = i + 1;
      }
    }
    if (b < s.size()) lines.push_back(s.substr(b));
    return py_str_list(lines);
  }
  if (m == "lower" || m == "upper" || m == "title" || m == "capitalize") {
    reader({}).check();
    return Value::str(m == "lower" ? py_lower(s) : m == "upper" ? py_upper(s) : m == "title" ? py_title(s) : py_capitalize(s));
  }
  if (m == "replace") {
    auto ar = reader({"old", "new", "count"});
    ar.check();
    const Value* o = ar.get(0);
    const Value* n = ar.get(1);
    if (!o || !n) r.fail(pos, "str.replace() takes at least 2 arguments");
    return Value::str(py_replace(s, need_str(r, *o, "str.replace()", pos), need_str(r, *n, "str.replace()", pos),
                                 ar.integer(2, -1)));
  }
  if (m == "find" || m == "rfind" || m == "count") {
    auto ar = reader({"sub"});
    ar.check();
    const Value* sub = ar.get(0);
    if (!sub) r.fail(pos, fmt::format("str.{}() takes one argument", m));
    std::string x = need_str(r, *sub, ("str." + m + "()").c_str(), pos);
    if (m == "count") {
      if (x.empty()) return Value::integer(int64_t(py_len(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(x); p != std::string::npos; p = s.find(x, p + x.size())) ++n;
      return Value::integer(n);
    }
    size_t p = m == "find" ? s.find(x) : s.rfind(x);
    if (p == std::string::npos) return Value::integer(-1);
    return Value::integer(int64_t(py_len(s.substr(0, p))));
  }
  if (m == "join") {
    auto ar = reader({"iterable"});
    ar.check();
    const Value* it = ar.get(0);
    if (!it) r.fail(pos, "str.join() takes one argument");
    std::string out;
    bool first = true;
    for (const Value& e : iterate(r, *it, pos)) {
      if (!first) out += s;
      first = false;
      out += need_str(r, e, "str.join()", pos);
    }
    return Value::str(std::move(out));
  }
  if (m == "isdigit" || m == "isalpha" || m == "isspace" || m == "isalnum" || m == "islower" || m == "isupper") {
    reader({}).check();
    std::vector<uint32_t> c = cps_of(s);
    if (c.empty()) return Value::boolean(false);
    bool any_cased = false;
    for (uint32_t cp : c) {
      bool ok;
      if (m == "isdigit") ok = cp >= '0' && cp <= '9';
      else if (m == "isalpha") ok = unicode::is_letter(cp);
      else if (m == "isspace") ok = py_space(cp);
      else if (m == "isalnum") ok = unicode::is_letter(cp) || unicode::is_number(cp);
      else {
        bool lower = cp >= 'a' && cp <= 'z', upper = cp >= 'A' && cp <= 'Z';
        any_cased |= lower || upper;
        ok = m == "islower" ? !upper : !lower;
      }
      if (!ok) return Value::boolean(false);
    }
    return Value::boolean(m == "islower" || m == "isupper" ? any_cased : true);
  }
  r.fail(pos, fmt::format("string method '{}' is not supported", m));
}

Value dict_method(Renderer& r, const Value& obj, const std::string& m, Args& a, size_t pos) {
  ArgReader ar{r, a, pos, m.c_str(), {}};
  if (m == "items" || m == "keys" || m == "values") {
    ar.check();
    List l;
    for (const auto& [k, v] : obj.d->items) {
      if (m == "items") l.push_back(Value::list({Value::str(k), v}));
      else if (m == "keys") l.push_back(Value::str(k));
      else l.push_back(v);
    }
    return Value::list(std::move(l));
  }
  // get(key, default=None)
  ar.names = {"key", "default"};
  ar.check();
  const Value* key = ar.get(0);
  if (!key) r.fail(pos, "dict.get() takes at least one argument");
  const Value* def = ar.get(1);
  if (key->k == Value::Str)
    if (const Value* v = obj.d->find(key->s)) return *v;
  return def ? *def : Value::none();
}

// ============================================================================
// Filters and tests
// ============================================================================

using FilterFn = Value (*)(Renderer&, const Value&, Args&, size_t);
using TestFn = bool (*)(Renderer&, const Value&, Args&, size_t);

const Value& attr_path(Renderer& r, const Value& v, const std::string& path, Value& tmp, size_t pos) {
  tmp = v;
  size_t b = 0;
  while (b <= path.size()) {
    size_t e = path.find('.', b);
    if (e == std::string::npos) e = path.size();
    std::string part = path.substr(b, e - b);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    Value next = digits && tmp.k == Value::Seq ? get_item(r, tmp, Value::integer(std::stoll(part)), pos)
                                               : get_item(r, tmp, Value::str(part), pos);
    tmp = std::move(next);
    b = e + 1;
  }
  return tmp;
}

TestFn find_test(const std::string& name);
FilterFn find_filter(const std::string& name);

bool run_test(Renderer& r, const std::string& name, const Value& v, Args& a, size_t pos) {
  TestFn t = find_test(name);
  if (!t) r.fail(pos, fmt::format("unknown test '{}'", name));
  return t(r, v, a, pos);
}

int64_t py_len_of(Renderer& r, const Value& v, size_t pos) {
  switch (v.k) {
    case Value::Undef: return 0;
    case Value::Str: return int64_t(py_len(v.s));
    case Value::Seq: return int64_t(v.l->size());
    case Value::Map: case Value::Ns: return int64_t(v.d->items.size());
    default: r.fail(pos, fmt::format("object of type '{}' has no len()", type_name(v)));
  }
}

const Value& arg0(Renderer& r, Args& a, size_t pos, const char* what) {
  if (a.pos.empty()) r.fail(pos, fmt::format("test '{}' needs an argument", what));
  return a.pos[0];
}

// ---- tests ----
bool t_defined(Renderer&, const Value& v, Args&, size_t) { return v.k != Value::Undef; }
bool t_undefined(Renderer&, const Value& v, Args&, size_t) { return v.k == Value::Undef; }
bool t_none(Renderer&, const Value& v, Args&, size_t) { return v.k == Value::None; }
bool t_boolean(Renderer&, const Value& v, Args&, size_t) { return v.k == Value::Bool; }
bool t_true(Renderer&, const Value& v, Args&, size_t) { return v.k == Value::Bool && v.b; }
bool t_false(Renderer&, const Value& v, Args&, size_t) { return v.k == Value::Bool && !v.b; }
bool t_integer(Renderer&, const Value& v, Args&, size_t) { return v.k == Value::Int; }
bool t_float(Renderer&, const Value& v, Args&, size_t) { return v.k == Value::Float; }
bool t_number(Renderer&, const Value& v, Args&, size_t) { return v.numeric(); }
bool t_string(Renderer&, const Value& v, Args&, size_t) { return v.k == Value::Str; }
bool t_mapping(Renderer&, const Value& v, Args&, size_t) { return v.k == Value::Map; }
bool t_iterable(Renderer&, const Value& v, Args&, size_t) {
  return v.k == Value::Str || v.k == Value::Seq || v.k == Value::Map || v.k == Value::Undef;
}
bool t_sequence(Renderer&, const Value& v, Args&, size_t) {
  return v.k == Value::Str || v.k == Value::Seq || v.k == Value::Map;
}
bool t_callable(Renderer&, const Value& v, Args&, size_t) { return v.k == Value::Func; }
bool t_odd(Renderer& r, const Value& v, Args&, size_t pos) {
  if (!v.integral()) r.fail(pos, "test 'odd' needs an integer");
  return v.as_int() % 2 != 0;
}
bool t_even(Renderer& r, const Value& v, Args&, size_t pos) {
  if (!v.integral()) r.fail(pos, "test 'even' needs an integer");
  return v.as_int() % 2 == 0;
}
bool t_divisibleby(Renderer& r, const Value& v, Args& a, size_t pos) {
  const Value& n = arg0(r, a, pos, "divisibleby");
  if (!v.integral() || !n.integral() || n.as_int() == 0) r.fail(pos, "test 'divisibleby' needs non-zero integers");
  return v.as_int() % n.as_int() == 0;
}
bool t_eq(Renderer& r, const Value& v, Args& a, size_t pos) { return equals(v, arg0(r, a, pos, "eq")); }
bool t_ne(Renderer& r, const Value& v, Args& a, size_t pos) { return !equals(v, arg0(r, a, pos, "ne")); }
bool t_lt(Renderer& r, const Value& v, Args& a, size_t pos) { return compare(r, v, arg0(r, a, pos, "lt"), pos) < 0; }
bool t_le(Renderer& r, const Value& v, Args& a, size_t pos) { return compare(r, v, arg0(r, a, pos, "le"), pos) <= 0; }
bool t_gt(Renderer& r, const Value& v, Args& a, size_t pos) { return compare(r, v, arg0(r, a, pos, "gt"), pos) > 0; }
bool t_ge(Renderer& r, const Value& v, Args& a, size_t pos) { return compare(r, v, arg0(r, a, pos, "ge"), pos) >= 0; }
bool t_in(Renderer& r, const Value& v, Args& a, size_t pos) { return contains(r, v, arg0(r, a, pos, "in"), pos); }
bool t_lower(Renderer&, const Value& v, Args&, size_t) { return v.k == Value::Str && py_lower(v.s) == v.s; }
bool t_upper(Renderer&, const Value& v, Args&, size_t) { return v.k == Value::Str && py_upper(v.s) == v.s; }
bool t_sameas(Renderer& r, const Value& v, Args& a, size_t pos) {
  const Value& o = arg0(r, a, pos, "sameas");
  if (v.k != o.k) return false;
  switch (v.k) {
    case Value::None: case Value::Undef: return true;
    case Value::Bool: return v.b == o.b;
    case Value::Seq: return v.l == o.l;
    case Value::Map: case Value::Ns: return v.d == o.d;
    default: return equals(v, o);
  }
}

TestFn find_test(const std::string& n) {
  static const std::vector<std::pair<std::string, TestFn>> tests = {
      {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none}, {"boolean", t_boolean},
      {"true", t_true}, {"false", t_false}, {"integer", t_integer}, {"float", t_float},
      {"number", t_number}, {"string", t_string}, {"mapping", t_mapping}, {"iterable", t_iterable},
      {"sequence", t_sequence}, {"callable", t_callable}, {"odd", t_odd}, {"even", t_even},
      {"divisibleby", t_divisibleby}, {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq}, {"ne", t_ne},
      {"!=", t_ne}, {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"le", t_le}, {"<=", t_le},
      {"gt", t_gt}, {"greaterthan", t_gt}, {">", t_gt}, {"ge", t_ge}, {">=", t_ge}, {"in", t_in},
      {"lower", t_lower}, {"upper", t_upper}, {"sameas", t_sameas},
  };
  for (const auto& [k, f] : tests)
    if (k == n) return f;
  return nullptr;
}

// ---- filters ----
Value f_trim(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader ar{r, a, pos, "trim", {"chars"}};
  ar.check();
  return Value::str(py_strip(to_str(v), ar.get(0), true, true));
}
Value f_tojson(Renderer& r, const Value& v, Args& a, size_t pos) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  ArgReader ar{r, a, pos, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}};
  ar.check();
  JsonOpts o;
  o.ensure_ascii = ar.flag(0, false);
  o.indent = int(ar.integer(1, -1));
  if (o.indent >= 0) o.item_sep = ",";
  if (const Value* s = ar.get(2); s && s->k != Value::None) {
    if (s->k != Value::Seq || s->l->size() != 2 || (*s->l)[0].k != Value::Str || (*s->l)[1].k != Value::Str)
      r.fail(pos, "tojson(): separators must be a pair of strings");
    o.item_sep = (*s->l)[0].s;
    o.key_sep = (*s->l)[1].s;
  }
  o.sort_keys = ar.flag(3, false);
  std::string out, bad;
  if (!dump_json(v, o, 0, out, &bad)) r.fail(pos, fmt::format("tojson(): object of type {} is not JSON serializable", bad));
  return Value::str(std::move(out));
}
Value f_length(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader{r, a, pos, "length", {}}.check();
  return Value::integer(py_len_of(r, v, pos));
}
Value f_default(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader ar{r, a, pos, "default", {"default_value", "boolean"}};
  ar.check();
  bool boolean = ar.flag(1, false);
  if (v.k == Value::Undef || (boolean && !truthy(v))) {
    const Value* d = ar.get(0);
    return d ? *d : Value::str("");
  }
  return v;
}
Value f_string(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader{r, a, pos, "string", {}}.check();
  return Value::str(to_str(v));
}
Value f_lower(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader{r, a, pos, "lower", {}}.check();
  return Value::str(py_lower(to_str(v)));
}
Value f_upper(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader{r, a, pos, "upper", {}}.check();
  return Value::str(py_upper(to_str(v)));
}
Value f_capitalize(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader{r, a, pos, "capitalize", {}}.check();
  return Value::str(py_capitalize(to_str(v)));
}
Value f_title(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader{r, a, pos, "title", {}}.check();
  return Value::str(py_title(to_str(v)));
}
Value f_replace(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader ar{r, a, pos, "replace", {"old", "new", "count"}};
  ar.check();
  const Value* o = ar.get(0);
  const Value* n = ar.get(1);
  if (!o || !n) r.fail(pos, "replace() needs old and new");
  return Value::str(py_replace(to_str(v), to_str(*o), to_str(*n), ar.integer(2, -1)));
}
Value f_join(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader ar{r, a, pos, "join", {"d", "attribute"}};
  ar.check();
  std::string sep = ar.get(0) ? to_str(*ar.get(0)) : "";
  std::string attribute = ar.str(1, "");
  std::string out;
  bool first = true;
  for (const Value& e : iterate(r, v, pos)) {
    if (!first) out += sep;
    first = false;
    Value tmp;
    out += to_str(attribute.empty() ? e : attr_path(r, e, attribute, tmp, pos));
  }
  return Value::str(std::move(out));
}
Value f_items(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader{r, a, pos, "items", {}}.check();
  if (v.k == Value::Undef) return Value::list();
  if (v.k != Value::Map) r.fail(pos, fmt::format("items() needs a mapping, not {}", type_name(v)));
  return dict_method(r, v, "items", a, pos);
}
Value f_first(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader{r, a, pos, "first", {}}.check();
  List l = iterate(r, v, pos);
  return l.empty() ? Value::undef() : l.front();
}
Value f_last(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader{r, a, pos, "last", {}}.check();
  List l = iterate(r, v, pos);
  return l.empty() ? Value::undef() : l.back();
}
Value f_list(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader{r, a, pos, "list", {}}.check();
  return Value::list(iterate(r, v, pos));
}
Value f_reverse(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader{r, a, pos, "reverse", {}}.check();
  List l = iterate(r, v, pos);
  std::reverse(l.begin(), l.end());
  if (v.k == Value::Str) {
    std::string s;
    for (const Value& c : l) s += c.s;
    return Value::str(std::move(s));
  }
  return Value::list(std::move(l));
}
Value sort_key(const Value& v, bool case_sensitive) {
  return (!case_sensitive && v.k == Value::Str) ? Value::str(py_lower(v.s)) : v;
}
Value f_sort(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader ar{r, a, pos, "sort", {"reverse", "case_sensitive", "attribute"}};
  ar.check();
  bool rev = ar.flag(0, false), cs = ar.flag(1, false);
  std::string attribute = ar.str(2, "");
  List l = iterate(r, v, pos);
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& e : l) {
    Value tmp;
    keyed.emplace_back(sort_key(attribute.empty() ? e : attr_path(r, e, attribute, tmp, pos), cs), e);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return rev ? compare(r, y.first, x.first, pos) < 0 : compare(r, x.first, y.first, pos) < 0;
  });
  List out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}
Value f_unique(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader ar{r, a, pos, "unique", {"case_sensitive", "attribute"}};
  ar.check();
  bool cs = ar.flag(0, false);
  std::string attribute = ar.str(1, "");
  List out, seen;
  for (const Value& e : iterate(r, v, pos)) {
    Value tmp;
    Value k = sort_key(attribute.empty() ? e : attr_path(r, e, attribute, tmp, pos), cs);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
      seen.push_back(k);
      out.push_back(e);
    }
  }
  return Value::list(std::move(out));
}
Value f_map(Renderer& r, const Value& v, Args& a, size_t pos) {
  List out;
  std::string attribute;
  bool has_default = false;
  Value def;
  for (const auto& [k, x] : a.kw) {
    if (k == "attribute") attribute = need_str(r, x, "map(attribute=)", pos);
    else if (k == "default") has_default = true, def = x;
    else if (!a.pos.empty()) continue;
    else r.fail(pos, fmt::format("map() got an unexpected keyword argument '{}'", k));
  }
  if (!attribute.empty()) {
    if (!a.pos.empty()) r.fail(pos, "map() takes either a filter name or attribute=");
    for (const Value& e : iterate(r, v, pos)) {
      Value tmp;
      Value x = attr_path(r, e, attribute, tmp, pos);
      out.push_back(x.k == Value::Undef && has_default ? def : x);
    }
    return Value::list(std::move(out));
  }
  if (a.pos.empty()) r.fail(pos, "map() needs a filter name or attribute=");
  std::string name = need_str(r, a.pos[0], "map()", pos);
  FilterFn f = find_filter(name);
  if (!f) r.fail(pos, fmt::format("unknown filter '{}'", name));
  Args rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (const Value& e : iterate(r, v, pos)) out.push_back(f(r, e, rest, pos));
  return Value::list(std::move(out));
}
Value select_impl(Renderer& r, const Value& v, Args& a, size_t pos, bool attr, bool keep) {
  if (!a.kw.empty()) r.fail(pos, "select/reject filters take no keyword arguments");
  size_t i = 0;
  std::string attribute;
  if (attr) {
    if (a.pos.empty()) r.fail(pos, "selectattr/rejectattr need an attribute name");
    attribute = need_str(r, a.pos[0], "selectattr()", pos);
    i = 1;
  }
  std::string test;
  if (i < a.pos.size()) test = need_str(r, a.pos[i++], "select()", pos);
  Args targs;
  targs.pos.assign(a.pos.begin() + long(std::min(i, a.pos.size())), a.pos.end());
  List out;
  for (const Value& e : iterate(r, v, pos)) {
    Value tmp;
    const Value& x = attr ? attr_path(r, e, attribute, tmp, pos) : e;
    bool ok = test.empty() ? truthy(x) : run_test(r, test, x, targs, pos);
    if (ok == keep) out.push_back(e);
  }
  return Value::list(std::move(out));
}
Value f_select(Renderer& r, const Value& v, Args& a, size_t pos) { return select_impl(r, v, a, pos, false, true); }
Value f_reject(Renderer& r, const Value& v, Args& a, size_t pos) { return select_impl(r, v, a, pos, false, false); }
Value f_selectattr(Renderer& r, const Value& v, Args& a, size_t pos) { return select_impl(r, v, a, pos, true, true); }
Value f_rejectattr(Renderer& r, const Value& v, Args& a, size_t pos) { return select_impl(r, v, a, pos, true, false); }
Value f_int(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader ar{r, a, pos, "int", {"default", "base"}};
  ar.check();
  int64_t def = ar.integer(0, 0);
  if (v.integral()) return Value::integer(v.as_int());
  if (v.k == Value::Float) return Value::integer(std::isfinite(v.f) ? int64_t(v.f) : def);
  if (v.k == Value::Str) {
    std::string s = py_strip(v.s, nullptr, true, true);
    int64_t x;
    auto res = std::from_chars(s.data(), s.data() + s.size(), x);
    if (res.ec == std::errc() && res.ptr == s.data() + s.size()) return Value::integer(x);
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(d)) return Value::integer(int64_t(d));
  }
  return Value::integer(def);
}
Value f_float(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader ar{r, a, pos, "float", {"default"}};
  ar.check();
  const Value* d = ar.get(0);
  double def = d && d->numeric() ? d->as_double() : 0.0;
  if (v.numeric()) return Value::real(v.as_double());
  if (v.k == Value::Str) {
    std::string s = py_strip(v.s, nullptr, true, true);
    char* end = nullptr;
    double x = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return Value::real(x);
  }
  return Value::real(def);
}
Value f_abs(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader{r, a, pos, "abs", {}}.check();
  if (v.integral()) {
    if (v.as_int() == INT64_MIN) r.fail(pos, "integer overflow");
    return Value::integer(std::abs(v.as_int()));
  }
  if (v.k == Value::Float) return Value::real(std::fabs(v.f));
  r.fail(pos, fmt::format("bad operand type for abs(): '{}'", type_name(v)));
}
Value minmax(Renderer& r, const Value& v, Args& a, size_t pos, bool want_max) {
  ArgReader ar{r, a, pos, want_max ? "max" : "min", {"case_sensitive", "attribute"}};
  ar.check();
  bool cs = ar.flag(0, false);
  std::string attribute = ar.str(1, "");
  List l = iterate(r, v, pos);
  if (l.empty()) return Value::undef();
  size_t best = 0;
  Value bk;
  for (size_t i = 0; i < l.size(); ++i) {
    Value tmp;
    Value k = sort_key(attribute.empty() ? l[i] : attr_path(r, l[i], attribute, tmp, pos), cs);
    if (i == 0 || (want_max ? compare(r, k, bk, pos) > 0 : compare(r, k, bk, pos) < 0)) best = i, bk = k;
  }
  return l[best];
}
Value f_min(Renderer& r, const Value& v, Args& a, size_t pos) { return minmax(r, v, a, pos, false); }
Value f_max(Renderer& r, const Value& v, Args& a, size_t pos) { return minmax(r, v, a, pos, true); }
Value f_sum(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader ar{r, a, pos, "sum", {"attribute", "start"}};
  ar.check();
  std::string attribute = ar.str(0, "");
  Value total = ar.get(1) ? *ar.get(1) : Value::integer(0);
  for (const Value& e : iterate(r, v, pos)) {
    Value tmp;
    total = binary(r, "+", total, attribute.empty() ? e : attr_path(r, e, attribute, tmp, pos), pos);
  }
  return total;
}
Value f_indent(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader ar{r, a, pos, "indent", {"width", "first", "blank"}};
  ar.check();
  std::string pad;
  if (const Value* w = ar.get(0); w && w->k == Value::Str) pad = w->s;
  else pad = std::string(size_t(std::clamp<int64_t>(ar.integer(0, 4), 0, 1000)), ' ');
  bool first = ar.flag(1, false), blank = ar.flag(2, false);
  std::string s = to_str(v), out;
  std::vector<std::string> lines;
  size_t b = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == '\n') {
      lines.push_back(s.substr(b, i - b));
      b = i + 1;
    }
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += '\n';
    bool indent = (i > 0 || first) && (blank || !lines[i].empty());
    if (indent) out += pad;
    out += lines[i];
  }
  return Value::str(std::move(out));
}
Value f_safe(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader{r, a, pos, "safe", {}}.check();
  return v;
}

FilterFn find_filter(const std::string& n) {
  static const std::vector<std::pair<std::string, FilterFn>> filters = {
      {"trim", f_trim}, {"tojson", f_tojson}, {"length", f_length}, {"count", f_length},
      {"default", f_default}, {"d", f_default}, {"string", f_string}, {"lower", f_lower},
      {"upper", f_upper}, {"capitalize", f_capitalize}, {"title", f_title}, {"replace", f_replace},
      {"join", f_join}, {"items", f_items}, {"first", f_first}, {"last", f_last}, {"list", f_list},
      {"reverse", f_reverse}, {"sort", f_sort}, {"unique", f_unique}, {"map", f_map},
      {"select", f_select}, {"reject", f_reject}, {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr}, {"int", f_int}, {"float", f_float}, {"abs", f_abs},
      {"min", f_min}, {"max", f_max}, {"sum", f_sum}, {"indent", f_indent}, {"safe", f_safe},
  };
  for (const auto& [k, f] : filters)
    if (k == n) return f;
  return nullptr;
}

// ---- globals ----

struct Builtin final : Callable {
  Value (*impl)(Renderer&, Args&, size_t);
  Builtin(const char* n, Value (*f)(Renderer&, Args&, size_t)) : impl(f) { name = n; }
  Value call(Renderer& r, Args& a, size_t pos) override { return impl(r, a, pos); }
};

Value g_range(Renderer& r, Args& a, size_t pos) {
  if (!a.kw.empty() || a.pos.empty() || a.pos.size() > 3) r.fail(pos, "range() takes 1 to 3 integer arguments");
  for (const Value& v : a.pos)
    if (!v.integral()) r.fail(pos, fmt::format("range(): '{}' object cannot be interpreted as an integer", type_name(v)));
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) stop = a.pos[0].as_int();
  else start = a.pos[0].as_int(), stop = a.pos[1].as_int();
  if (a.pos.size() == 3) step = a.pos[2].as_int();
  if (step == 0) r.fail(pos, "range() arg 3 must not be zero");
  List l;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (int64_t(l.size()) >= kMaxRange) r.fail(pos, "range() is too long (more than 1000000 items)");
    l.push_back(Value::integer(i));
  }
  return Value::list(std::move(l));
}
Value g_namespace(Renderer& r, Args& a, size_t pos) {
  auto d = std::make_shared<Dict>();
  for (const Value& v : a.pos) {
    if (v.k != Value::Map) r.fail(pos, "namespace() takes a dict or keyword arguments");
    for (const auto& [k, x] : v.d->items) d->set(k, x);
  }
  for (const auto& [k, v] : a.kw) d->set(k, v);
  Value ns;
  ns.k = Value::Ns;
  ns.d = d;
  return ns;
}
Value g_dict(Renderer& r, Args& a, size_t pos) {
  Value v = g_namespace(r, a, pos);
  v.k = Value::Map;
  return v;
}
Value g_raise(Renderer& r, Args& a, size_t pos) {
  std::string msg = a.pos.empty() ? std::string() : to_str(a.pos[0]);
  fail("chat template raised an error: {} (at {})", msg, where(r.src, pos));
}
Value g_strftime_now(Renderer& r, Args& a, size_t pos) {
  if (a.pos.size() != 1 || a.pos[0].k != Value::Str) r.fail(pos, "strftime_now() takes one format string");
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[256];
  size_t n = std::strftime(buf, sizeof buf, a.pos[0].s.c_str(), &tm);
  return Value::str(std::string(buf, n));
}

const Value* find_global(const std::string& n) {
  static const std::vector<std::pair<std::string, Value>> globals = [] {
    std::vector<std::pair<std::string, Value>> g;
    auto add = [&](const char* name, Value (*f)(Renderer&, Args&, size_t)) {
      Value v;
      v.k = Value::Func;
      v.fn = std::make_shared<Builtin>(name, f);
      g.emplace_back(name, v);
    };
    add("range", g_range);
    add("namespace", g_namespace);
    add("dict", g_dict);
    add("raise_exception", g_raise);
    add("strftime_now", g_strftime_now);
    return g;
  }();
  for (const auto& [k, v] : globals)
    if (k == n) return &v;
  return nullptr;
}

// ============================================================================
// AST
// ============================================================================

struct Expr {
  size_t pos = 0;
  virtual ~Expr() = default;
  virtual Value eval(Renderer& r) const = 0;
};
using ExprP = std::unique_ptr<Expr>;

enum class Flow { Normal, Break, Continue };
struct Stmt {
  size_t pos = 0;
  virtual ~Stmt() = default;
  virtual Flow exec(Renderer& r) const = 0;
};
using Body = std::vector<std::unique_ptr<Stmt>>;

Flow exec_body(Renderer& r, const Body& b) {
  for (const auto& s : b) {
    r.tick(s->pos);
    Flow f = s->exec(r);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

struct Literal final : Expr {
  Value v;
  Value eval(Renderer&) const override { return v; }
};
struct NameExpr final : Expr {
  std::string name;
  Value eval(Renderer& r) const override {
    if (Value* v = r.scope->find(name)) return *v;
    if (const Value* g = find_global(name)) return *g;
    return Value::undef(name);
  }
};
struct AttrExpr final : Expr {
  ExprP obj;
  std::string name;
  Value eval(Renderer& r) const override { return get_attr(r, obj->eval(r), name, pos); }
};
struct ItemExpr final : Expr {
  ExprP obj, key;
  Value eval(Renderer& r) const override {
    Value o = obj->eval(r);
    return get_item(r, o, key->eval(r), pos);
  }
};
struct SliceExpr final : Expr {
  ExprP obj, a, b, c;
  Value eval(Renderer& r) const override {
    Value o = obj->eval(r);
    Value va = a ? a->eval(r) : Value::none(), vb = b ? b->eval(r) : Value::none(), vc = c ? c->eval(r) : Value::none();
    for (const Value* v : {&va, &vb, &vc})
      if (v->k != Value::None && !v->integral())
        r.fail(pos, "slice indices must be integers or None");
    if (vc.k != Value::None && vc.as_int() == 0) r.fail(pos, "slice step cannot be zero");
    if (o.k == Value::Undef) r.undefined(o, pos);
    if (o.k != Value::Seq && o.k != Value::Str) r.fail(pos, fmt::format("'{}' object is not subscriptable", type_name(o)));
    std::vector<uint32_t> cps;
    if (o.k == Value::Str) cps = cps_of(o.s);
    int64_t len = o.k == Value::Str ? int64_t(cps.size()) : int64_t(o.l->size());
    int64_t start, stop, step;
    slice_indices(len, va, vb, vc, start, stop, step);
    List l;
    std::string s;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (o.k == Value::Str) unicode::append_utf8(s, cps[size_t(i)]);
      else l.push_back((*o.l)[size_t(i)]);
    }
    return o.k == Value::Str ? Value::str(std::move(s)) : Value::list(std::move(l));
  }
};
struct CallArgs {
  std::vector<ExprP> pos;
  std::vector<std::pair<std::string, ExprP>> kw;
  Args eval(Renderer& r) const {
    Args a;
    for (const auto& e : pos) a.pos.push_back(e->eval(r));
    for (const auto& [k, e] : kw) a.kw.emplace_back(k, e->eval(r));
    return a;
  }
};
struct CallExpr final : Expr {
  ExprP callee;
  CallArgs args;
  Value eval(Renderer& r) const override {
    if (auto* at = dynamic_cast<const AttrExpr*>(callee.get())) {
      Value obj = at->obj->eval(r);
      Args a = args.eval(r);
      switch (obj.k) {
        case Value::Undef: r.undefined(obj, pos);
        case Value::Str: return str_method(r, obj.s, at->name, a, pos);
        case Value::Map:
          if (at->name == "items" || at->name == "keys" || at->name == "values" || at->name == "get")
            return dict_method(r, obj, at->name, a, pos);
          break;
        case Value::Ns: break;
        default:
          r.fail(pos, fmt::format("'{}' object has no method '{}' (or it is not supported)", type_name(obj), at->name));
      }
      Value f = get_attr(r, obj, at->name, pos);
      if (f.k != Value::Func) r.fail(pos, fmt::format("'{}' is not callable", at->name));
      return f.fn->call(r, a, pos);
    }
    Value f = callee->eval(r);
    if (f.k == Value::Undef) r.undefined(f, pos);
    if (f.k != Value::Func) r.fail(pos, fmt::format("'{}' object is not callable", type_name(f)));
    Args a = args.eval(r);
    return f.fn->call(r, a, pos);
  }
};
struct FilterExpr final : Expr {
  ExprP obj;
  std::string name;
  FilterFn fn = nullptr;
  CallArgs args;
  Value eval(Renderer& r) const override {
    Value v = obj->eval(r);
    Args a = args.eval(r);
    return fn(r, v, a, pos);
  }
};
struct TestExpr final : Expr {
  ExprP obj;
  std::string name;
  TestFn fn = nullptr;
  CallArgs args;
  bool negated = false;
  Value eval(Renderer& r) const override {
    Value v = obj->eval(r);
    Args a = args.eval(r);
    return Value::boolean(fn(r, v, a, pos) != negated);
  }
};
struct UnaryExpr final : Expr {
  char op;  // '-', '+', '!'
  ExprP e;
  Value eval(Renderer& r) const override {
    Value v = e->eval(r);
    if (op == '!') return Value::boolean(!truthy(v));
    if (v.k == Value::Undef) r.undefined(v, pos);
    if (!v.numeric()) r.fail(pos, fmt::format("bad operand type for unary {}: '{}'", op, type_name(v)));
    if (op == '+') return v.k == Value::Bool ? Value::integer(v.as_int()) : v;
    if (v.k == Value::Float) return Value::real(-v.f);
    if (v.as_int() == INT64_MIN) r.fail(pos, "integer overflow");
    return Value::integer(-v.as_int());
  }
};
struct BinaryExpr final : Expr {
  std::string op;
  ExprP l, rhs;
  Value eval(Renderer& r) const override {
    if (op == "and") {
      Value a = l->eval(r);
      return truthy(a) ? rhs->eval(r) : a;
    }
    if (op == "or") {
      Value a = l->eval(r);
      return truthy(a) ? a : rhs->eval(r);
    }
    Value a = l->eval(r);
    Value b = rhs->eval(r);
    return binary(r, op, a, b, pos);
  }
};
struct CompareExpr final : Expr {
  ExprP first;
  std::vector<std::pair<std::string, ExprP>> rest;
  Value eval(Renderer& r) const override {
    Value a = first->eval(r);
    for (const auto& [op, e] : rest) {
      Value b = e->eval(r);
      bool ok;
      if (op == "==") ok = equals(a, b);
      else if (op == "!=") ok = !equals(a, b);
      else if (op == "in") ok = contains(r, a, b, pos);
      else if (op == "notin") ok = !contains(r, a, b, pos);
      else {
        int c = compare(r, a, b, pos);
        ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
      }
      if (!ok) return Value::boolean(false);
      a = std::move(b);
    }
    return Value::boolean(true);
  }
};
struct CondExpr final : Expr {
  ExprP cond, yes, no;
  Value eval(Renderer& r) const override {
    if (truthy(cond->eval(r))) return yes->eval(r);
    return no ? no->eval(r) : Value::undef();
  }
};
struct ListExpr final : Expr {
  std::vector<ExprP> items;
  bool tuple = false;
  Value eval(Renderer& r) const override {
    List l;
    for (const auto& e : items) l.push_back(e->eval(r));
    Value v = Value::list(std::move(l));
    v.tuple = tuple;
    return v;
  }
};
struct DictExpr final : Expr {
  std::vector<std::pair<ExprP, ExprP>> items;
  Value eval(Renderer& r) const override {
    auto d = std::make_shared<Dict>();
    for (const auto& [k, v] : items) {
      Value key = k->eval(r);
      if (key.k != Value::Str) r.fail(k->pos, fmt::format("dict keys must be strings here, not {}", type_name(key)));
      d->set(key.s, v->eval(r));
    }
    return Value::map(d);
  }
};

// ---- statements ----

struct TextStmt final : Stmt {
  std::string text;
  Flow exec(Renderer& r) const override {
    r.emit(text, pos);
    return Flow::Normal;
  }
};
struct OutputStmt final : Stmt {
  ExprP e;
  Flow exec(Renderer& r) const override {
    r.emit(to_str(e->eval(r)), pos);
    return Flow::Normal;
  }
};
struct IfStmt final : Stmt {
  std::vector<std::pair<ExprP, Body>> branches;
  Body otherwise;
  Flow exec(Renderer& r) const override {
    for (const auto& [c, body] : branches)
      if (truthy(c->eval(r))) return exec_body(r, body);
    return exec_body(r, otherwise);
  }
};

void assign_targets(Renderer& r, Scope& s, const std::vector<std::string>& targets, const Value& v, size_t pos) {
  if (targets.size() == 1) {
    s.set(targets[0], v);
    return;
  }
  List parts = iterate(r, v, pos);
  if (parts.size() != targets.size())
    r.fail(pos, fmt::format("cannot unpack {} values into {} names", parts.size(), targets.size()));
  for (size_t i = 0; i < targets.size(); ++i) s.set(targets[i], parts[i]);
}

struct ForStmt final : Stmt {
  std::vector<std::string> targets;
  ExprP iter, filter;
  Body body, otherwise;
  Flow exec(Renderer& r) const override {
    List items = iterate(r, iter->eval(r), iter->pos);
    Scope* const outer = r.scope;
    struct Restore {
      Renderer& r;
      Scope* s;
      ~Restore() { r.scope = s; }
    } restore{r, outer};
    if (filter) {
      List kept;
      for (Value& it : items) {
        Scope s;
        s.parent = outer;
        r.scope = &s;
        assign_targets(r, s, targets, it, pos);
        if (truthy(filter->eval(r))) kept.push_back(std::move(it));
      }
      items.swap(kept);
    }
    const int64_t n = int64_t(items.size());
    for (int64_t i = 0; i < n; ++i) {
      r.tick(pos);
      // Each iteration starts from the enclosing scope: what the body sets is
      // gone at the next iteration and after the loop (Jinja's scoping).
      Scope s;
      s.parent = outer;
      r.scope = &s;
      assign_targets(r, s, targets, items[size_t(i)], pos);
      auto loop = std::make_shared<Dict>();
      loop->items = {
          {"index", Value::integer(i + 1)},
          {"index0", Value::integer(i)},
          {"revindex", Value::integer(n - i)},
          {"revindex0", Value::integer(n - i - 1)},
          {"first", Value::boolean(i == 0)},
          {"last", Value::boolean(i == n - 1)},
          {"length", Value::integer(n)},
          {"depth", Value::integer(1)},
          {"depth0", Value::integer(0)},
          {"previtem", i > 0 ? items[size_t(i - 1)] : Value::undef("previtem")},
          {"nextitem", i + 1 < n ? items[size_t(i + 1)] : Value::undef("nextitem")},
      };
      s.set("loop", Value::map(loop));
      Flow f = exec_body(r, body);
      if (f == Flow::Break) break;
    }
    if (n == 0) {
      Scope s;
      s.parent = outer;
      r.scope = &s;
      return exec_body(r, otherwise);
    }
    return Flow::Normal;
  }
};

struct SetStmt final : Stmt {
  std::vector<std::string> targets;  // names, or {ns, attr} when ns_attr
  bool ns_attr = false;
  ExprP value;  // null: a set block
  Body block;
  Flow exec(Renderer& r) const override {
    Value v;
    if (value) {
      v = value->eval(r);
    } else {
      std::string buf;
      std::string* saved = r.out;
      r.out = &buf;
      struct Restore {
        Renderer& r;
        std::string* o;
        ~Restore() { r.out = o; }
      } restore{r, saved};
      exec_body(r, block);
      v = Value::str(std::move(buf));
    }
    if (ns_attr) {
      Value* ns = r.scope->find(targets[0]);
      if (!ns || ns->k != Value::Ns)
        r.fail(pos, fmt::format("cannot assign attribute on non-namespace object '{}'", targets[0]));
      ns->d->set(targets[1], std::move(v));
      return Flow::Normal;
    }
    assign_targets(r, *r.scope, targets, v, pos);
    return Flow::Normal;
  }
};

struct MacroDef;
struct Macro final : Callable {
  const MacroDef* def;
  explicit Macro(const MacroDef* d);
  Value call(Renderer& r, Args& a, size_t pos) override;
};
struct MacroDef final : Stmt {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprP> defaults;  // per param, may be null
  Body body;
  Flow exec(Renderer& r) const override {
    Value v;
    v.k = Value::Func;
    v.fn = std::make_shared<Macro>(this);
    r.scope->set(name, v);
    return Flow::Normal;
  }
};
Macro::Macro(const MacroDef* d) : def(d) { name = d->name; }
Value Macro::call(Renderer& r, Args& a, size_t pos) {
  if (r.depth >= kMaxCallDepth) r.fail(pos, "macro calls nest too deeply");
  if (a.pos.size() > def->params.size())
    r.fail(pos, fmt::format("macro '{}' takes {} argument(s), {} given", def->name, def->params.size(), a.pos.size()));
  Scope s;
  s.parent = r.root;
  std::vector<bool> given(def->params.size(), false);
  for (size_t i = 0; i < a.pos.size(); ++i) s.set(def->params[i], a.pos[i]), given[i] = true;
  for (auto& [k, v] : a.kw) {
    auto it = std::find(def->params.begin(), def->params.end(), k);
    if (it == def->params.end()) r.fail(pos, fmt::format("macro '{}' has no parameter '{}'", def->name, k));
    size_t i = size_t(it - def->params.begin());
    if (given[i]) r.fail(pos, fmt::format("macro '{}' got multiple values for '{}'", def->name, k));
    s.set(k, v);
    given[i] = true;
  }
  std::string buf;
  Scope* saved_scope = r.scope;
  std::string* saved_out = r.out;
  r.scope = &s;
  r.out = &buf;
  ++r.depth;
  struct Restore {
    Renderer& r;
    Scope* s;
    std::string* o;
    ~Restore() {
      r.scope = s;
      r.out = o;
      --r.depth;
    }
  } restore{r, saved_scope, saved_out};
  for (size_t i = 0; i < def->params.size(); ++i)
    if (!given[i]) s.set(def->params[i], def->defaults[i] ? def->defaults[i]->eval(r) : Value::undef(def->params[i]));
  exec_body(r, def->body);
  return Value::str(std::move(buf));
}

struct LoopCtl final : Stmt {
  bool brk;
  Flow exec(Renderer&) const override { return brk ? Flow::Break : Flow::Continue; }
};
struct BlockStmt final : Stmt {  // {% generation %}: renders its body
  Body body;
  Flow exec(Renderer& r) const override { return exec_body(r, body); }
};

// ============================================================================
// Lexer
// ============================================================================

enum class T : uint8_t { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, Int, Float, Str, Op, Eof };
struct Tok {
  T t;
  std::string s;
  int64_t i = 0;
  double f = 0;
  size_t pos = 0;
};

bool ws_char(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Python's unicode_escape, as Jinja applies it to string literals.
std::string unescape(const std::string& src, size_t b, size_t e, size_t pos) {
  std::string out;
  auto hex = [&](size_t at, size_t n) -> uint32_t {
    if (at + n > e) fail_at(src, pos, "truncated \\x/\\u escape in a string literal");
    uint32_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      char c = src[at + k];
      int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) fail_at(src, pos, "bad hex digit in a string literal escape");
      v = v * 16 + uint32_t(d);
    }
    return v;
  };
  for (size_t i = b; i < e; ++i) {
    char c = src[i];
    if (c != '\\' || i + 1 >= e) {
      out += c;
      continue;
    }
    char n = src[++i];
    switch (n) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\n': break;
      case 'x': unicode::append_utf8(out, hex(i + 1, 2)); i += 2; break;
      case 'u': unicode::append_utf8(out, hex(i + 1, 4)); i += 4; break;
      case 'U': {
        uint32_t cp = hex(i + 1, 8);
        if (cp > 0x10FFFF) fail_at(src, pos, "\\U escape out of range");
        unicode::append_utf8(out, cp);
        i += 8;
        break;
      }
      default:
        if (n >= '0' && n <= '7') {
          uint32_t v = 0;
          size_t k = 0;
          for (; k < 3 && i + k < e && src[i + k] >= '0' && src[i + k] <= '7'; ++k) v = v * 8 + uint32_t(src[i + k] - '0');
          unicode::append_utf8(out, v);
          i += k - 1;
        } else {
          out += '\\';
          out += n;
        }
    }
  }
  return out;
}

std::vector<Tok> lex(const std::string& src) {
  std::vector<Tok> out;
  const size_t n = src.size();
  size_t pos = 0;
  bool line_starting = true;
  auto after_tag = [&](size_t& p, bool minus, bool plus, bool block) {
    size_t start = p;
    if (minus) {
      while (p < n && ws_char(src[p])) ++p;
    } else if (block && !plus && p < n && src[p] == '\n') {
      ++p;  // trim_blocks
    }
    line_starting = p > start && src[p - 1] == '\n';
  };
  while (true) {
    size_t tag = pos;
    char kind = 0;
    while (true) {
      tag = src.find('{', tag);
      if (tag == std::string::npos || tag + 1 >= n) {
        tag = std::string::npos;
        break;
      }
      char c = src[tag + 1];
      if (c == '{' || c == '%' || c == '#') {
        kind = c;
        break;
      }
      ++tag;
    }
    std::string text = src.substr(pos, (tag == std::string::npos ? n : tag) - pos);
    if (tag == std::string::npos) {
      if (!text.empty()) out.push_back({T::Text, std::move(text), 0, 0, pos});
      break;
    }
    const char mod = tag + 2 < n ? src[tag + 2] : 0;
    const bool minus = mod == '-', plus = mod == '+' && kind != '{';
    if (minus) {
      while (!text.empty() && ws_char(text.back())) text.pop_back();
    } else if (kind != '{' && !plus) {  // lstrip_blocks
      size_t nl = text.rfind('\n');
      size_t lpos = nl == std::string::npos ? 0 : nl + 1;
      if ((lpos > 0 || line_starting) && text.find_first_not_of(" \t", lpos) == std::string::npos) text.resize(lpos);
    }
    if (!text.empty()) out.push_back({T::Text, std::move(text), 0, 0, pos});
    size_t p = tag + 2 + ((minus || plus) ? 1 : 0);
    if (kind == '#') {
      size_t e = src.find("#}", p);
      if (e == std::string::npos) fail_at(src, tag, "unclosed comment '{#' (no matching '#}')");
      bool emin = e > p && src[e - 1] == '-', eplus = e > p && src[e - 1] == '+';
      p = e + 2;
      after_tag(p, emin, eplus, true);
      pos = p;
      continue;
    }
    const char* close = kind == '{' ? "}}" : "%}";
    const char* what = kind == '{' ? "'{{' (no matching '}}')" : "'{%' (no matching '%}')";
    out.push_back({kind == '{' ? T::VarBegin : T::BlockBegin, "", 0, 0, tag});
    size_t begin_tok = out.size();
    bool emin = false, eplus = false;
    std::string brackets;  // open ( [ {: a tag only ends where they are balanced, as in Jinja
    while (true) {
      while (p < n && ws_char(src[p])) ++p;
      if (p >= n) fail_at(src, tag, std::string("unclosed ") + what);
      if (!brackets.empty()) {
        // inside brackets "}}" is two closing braces
      } else if (src.compare(p, 2, close) == 0) {
        p += 2;
        break;
      }
      if (brackets.empty() && (src[p] == '-' || (src[p] == '+' && kind == '%')) && src.compare(p + 1, 2, close) == 0) {
        (src[p] == '-' ? emin : eplus) = true;
        p += 3;
        break;
      }
      const size_t tp = p;
      char c = src[p];
      if (std::isalpha(uint8_t(c)) || c == '_') {
        size_t e = p;
        while (e < n && (std::isalnum(uint8_t(src[e])) || src[e] == '_')) ++e;
        out.push_back({T::Name, src.substr(p, e - p), 0, 0, tp});
        p = e;
      } else if (std::isdigit(uint8_t(c))) {
        size_t e = p;
        while (e < n && (std::isdigit(uint8_t(src[e])) || src[e] == '_')) ++e;
        bool is_float = false;
        if (e + 1 < n && src[e] == '.' && std::isdigit(uint8_t(src[e + 1]))) {
          is_float = true;
          ++e;
          while (e < n && (std::isdigit(uint8_t(src[e])) || src[e] == '_')) ++e;
        }
        if (e < n && (src[e] == 'e' || src[e] == 'E')) {
          size_t x = e + 1;
          if (x < n && (src[x] == '+' || src[x] == '-')) ++x;
          if (x < n && std::isdigit(uint8_t(src[x]))) {
            is_float = true;
            e = x;
            while (e < n && std::isdigit(uint8_t(src[e]))) ++e;
          }
        }
        std::string num;
        for (size_t k = p; k < e; ++k)
          if (src[k] != '_') num += src[k];
        Tok t{is_float ? T::Float : T::Int, num, 0, 0, tp};
        if (is_float) {
          t.f = std::strtod(num.c_str(), nullptr);
        } else {
          auto res = std::from_chars(num.data(), num.data() + num.size(), t.i);
          if (res.ec != std::errc()) fail_at(src, tp, "integer literal out of range");
        }
        out.push_back(std::move(t));
        p = e;
      } else if (c == '\'' || c == '"') {
        size_t e = p + 1;
        while (e < n && src[e] != c) e += src[e] == '\\' ? 2 : 1;
        if (e >= n) fail_at(src, tp, "unterminated string literal");
        out.push_back({T::Str, unescape(src, p + 1, e, tp), 0, 0, tp});
        p = e + 1;
      } else {
        static const char* const ops2[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* o : ops2)
          if (src.compare(p, 2, o) == 0) op = o;
        if (op.empty() && std::string_view("+-*/%~<>=()[]{},.:|").find(c) != std::string_view::npos) op = std::string(1, c);
        if (op.empty()) fail_at(src, tp, fmt::format("unexpected character '{}'", c));
        if (op == "(" || op == "[" || op == "{") {
          brackets += op == "(" ? ')' : op == "[" ? ']' : '}';
        } else if (op == ")" || op == "]" || op == "}") {
          if (brackets.empty()) fail_at(src, tp, fmt::format("unexpected '{}'", op));
          if (brackets.back() != op[0]) fail_at(src, tp, fmt::format("unexpected '{}', expected '{}'", op, brackets.back()));
          brackets.pop_back();
        }
        out.push_back({T::Op, op, 0, 0, tp});
        p += op.size();
      }
    }
    out.push_back({kind == '{' ? T::VarEnd : T::BlockEnd, "", 0, 0, p - 2});
    // {% raw %} ... {% endraw %}: the text in between, verbatim.
    if (kind == '%' && out.size() == begin_tok + 2 && out[begin_tok].t == T::Name && out[begin_tok].s == "raw") {
      out.resize(begin_tok - 1);
      size_t body = p;
      after_tag(body, emin, eplus, true);
      size_t s = body;
      while (true) {
        s = src.find("{%", s);
        if (s == std::string::npos) fail_at(src, tag, "unclosed '{% raw %}' (no '{% endraw %}')");
        size_t q = s + 2;
        bool rmin = q < n && src[q] == '-';
        if (q < n && (src[q] == '-' || src[q] == '+')) ++q;
        while (q < n && ws_char(src[q])) ++q;
        if (src.compare(q, 6, "endraw") != 0) {
          s += 2;
          continue;
        }
        q += 6;
        while (q < n && ws_char(src[q])) ++q;
        bool qmin = false, qplus = false;
        if (q < n && (src[q] == '-' || src[q] == '+')) (src[q] == '-' ? qmin : qplus) = true, ++q;
        if (src.compare(q, 2, "%}") != 0) fail_at(src, s, "malformed '{% endraw %}'");
        std::string raw = src.substr(body, s - body);
        if (rmin)
          while (!raw.empty() && ws_char(raw.back())) raw.pop_back();
        if (!raw.empty()) out.push_back({T::Text, std::move(raw), 0, 0, body});
        p = q + 2;
        after_tag(p, qmin, qplus, true);
        break;
      }
      pos = p;
      continue;
    }
    after_tag(p, emin, eplus, kind == '%');
    pos = p;
  }
  out.push_back({T::Eof, "", 0, 0, n});
  return out;
}

// ============================================================================
// Parser
// ============================================================================

}  // namespace

struct ChatTemplate::Impl {
  std::string src;
  Body body;
  std::set<std::string, std::less<>> names;
  bool iterates_content = false;
};

namespace {

bool is_content_access(const Expr* e) {
  if (auto* n = dynamic_cast<const NameExpr*>(e)) return n->name == "content";
  if (auto* a = dynamic_cast<const AttrExpr*>(e)) return a->name == "content";
  if (auto* i = dynamic_cast<const ItemExpr*>(e))
    if (auto* k = dynamic_cast<const Literal*>(i->key.get())) return k->v.k == Value::Str && k->v.s == "content";
  return false;
}

struct Parser {
  ChatTemplate::Impl& impl;
  const std::string& src;
  std::vector<Tok> toks;
  size_t i = 0;
  int depth = 0;
  int loops = 0;

  const Tok& cur() const { return toks[i]; }
  const Tok& at(size_t k) const { return toks[std::min(i + k, toks.size() - 1)]; }
  bool op(const char* s) const { return cur().t == T::Op && cur().s == s; }
  bool name(const char* s) const { return cur().t == T::Name && cur().s == s; }
  [[noreturn]] void error(const std::string& msg) const { fail_at(src, cur().pos, msg); }
  [[noreturn]] void error_at(size_t pos, const std::string& msg) const { fail_at(src, pos, msg); }
  std::string describe(const Tok& t) const {
    switch (t.t) {
      case T::Eof: return "end of template";
      case T::VarEnd: return "'}}'";
      case T::BlockEnd: return "'%}'";
      case T::VarBegin: return "'{{'";
      case T::BlockBegin: return "'{%'";
      case T::Text: return "text";
      case T::Str: return "string " + py_repr_str(t.s);
      default: return "'" + t.s + "'";
    }
  }
  [[noreturn]] void unexpected(const char* expected) const {
    error(fmt::format("unexpected {}, expected {}", describe(cur()), expected));
  }
  void expect_op(const char* s) {
    if (!op(s)) unexpected((std::string("'") + s + "'").c_str());
    ++i;
  }
  std::string expect_name(const char* what = "a name") {
    if (cur().t != T::Name) unexpected(what);
    return toks[i++].s;
  }
  void expect(T t, const char* what) {
    if (cur().t != t) unexpected(what);
    ++i;
  }
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& pp) : p(pp) {
      if (++p.depth > kMaxParseDepth) p.error("the template nests too deeply");
    }
    ~DepthGuard() { --p.depth; }
  };

  template <class N>
  std::unique_ptr<N> node(size_t pos) {
    auto n = std::make_unique<N>();
    n->pos = pos;
    return n;
  }

  // ---- expressions ----
  ExprP expression() { return condexpr(); }

  ExprP condexpr() {
    DepthGuard g(*this);
    ExprP e = or_expr();
    while (name("if")) {
      size_t p = cur().pos;
      ++i;
      auto c = node<CondExpr>(p);
      c->cond = or_expr();
      if (name("else")) {
        ++i;
        c->no = condexpr();
      }
      c->yes = std::move(e);
      e = std::move(c);
    }
    return e;
  }
  ExprP or_expr() {
    ExprP l = and_expr();
    while (name("or")) {
      auto b = node<BinaryExpr>(cur().pos);
      ++i;
      b->op = "or";
      b->l = std::move(l);
      b->rhs = and_expr();
      l = std::move(b);
    }
    return l;
  }
  ExprP and_expr() {
    ExprP l = not_expr();
    while (name("and")) {
      auto b = node<BinaryExpr>(cur().pos);
      ++i;
      b->op = "and";
      b->l = std::move(l);
      b->rhs = not_expr();
      l = std::move(b);
    }
    return l;
  }
  ExprP not_expr() {
    if (name("not")) {
      DepthGuard g(*this);
      auto u = node<UnaryExpr>(cur().pos);
      ++i;
      u->op = '!';
      u->e = not_expr();
      return u;
    }
    return compare_expr();
  }
  ExprP compare_expr() {
    size_t p = cur().pos;
    ExprP first = math1();
    std::vector<std::pair<std::string, ExprP>> rest;
    while (true) {
      std::string o;
      if (cur().t == T::Op && (cur().s == "==" || cur().s == "!=" || cur().s == "<" || cur().s == ">" ||
                               cur().s == "<=" || cur().s == ">=")) {
        o = cur().s;
        ++i;
      } else if (name("in")) {
        o = "in";
        ++i;
      } else if (name("not") && at(1).t == T::Name && at(1).s == "in") {
        o = "notin";
        i += 2;
      } else {
        break;
      }
      rest.emplace_back(o, math1());
    }
    if (rest.empty()) return first;
    auto c = node<CompareExpr>(p);
    c->first = std::move(first);
    c->rest = std::move(rest);
    return c;
  }
  ExprP binop_chain(ExprP (Parser::*next)(), std::initializer_list<const char*> ops) {
    ExprP l = (this->*next)();
    while (true) {
      const char* found = nullptr;
      for (const char* o : ops)
        if (op(o)) found = o;
      if (!found) return l;
      auto b = node<BinaryExpr>(cur().pos);
      ++i;
      b->op = found;
      b->l = std::move(l);
      b->rhs = (this->*next)();
      l = std::move(b);
    }
  }
  ExprP math1() { return binop_chain(&Parser::concat, {"+", "-"}); }
  ExprP concat() { return binop_chain(&Parser::math2, {"~"}); }
  ExprP math2() { return binop_chain(&Parser::pow_expr, {"*", "/", "//", "%"}); }
  ExprP pow_expr() { return binop_chain(&Parser::unary_f, {"**"}); }
  ExprP unary_f() { return unary(true); }
  ExprP unary(bool with_filter) {
    DepthGuard g(*this);
    ExprP e;
    if (op("-") || op("+")) {
      auto u = node<UnaryExpr>(cur().pos);
      u->op = cur().s[0];
      ++i;
      u->e = unary(false);
      e = std::move(u);
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (with_filter) e = filters(std::move(e));
    return e;
  }
  ExprP primary() {
    const Tok& t = cur();
    switch (t.t) {
      case T::Name: {
        auto lit = [&](Value v) {
          auto l = node<Literal>(t.pos);
          l->v = std::move(v);
          ++i;
          return ExprP(std::move(l));
        };
        if (t.s == "true" || t.s == "True") return lit(Value::boolean(true));
        if (t.s == "false" || t.s == "False") return lit(Value::boolean(false));
        if (t.s == "none" || t.s == "None") return lit(Value::none());
        auto nm = node<NameExpr>(t.pos);
        nm->name = t.s;
        impl.names.insert(t.s);
        ++i;
        return nm;
      }
      case T::Str: {
        auto l = node<Literal>(t.pos);
        std::string s;
        while (cur().t == T::Str) s += toks[i++].s;  // adjacent literals concatenate
        l->v = Value::str(std::move(s));
        return l;
      }
      case T::Int: {
        auto l = node<Literal>(t.pos);
        l->v = Value::integer(t.i);
        ++i;
        return l;
      }
      case T::Float: {
        auto l = node<Literal>(t.pos);
        l->v = Value::real(t.f);
        ++i;
        return l;
      }
      case T::Op:
        if (t.s == "(") {
          size_t p = t.pos;
          ++i;
          if (op(")")) {
            ++i;
            auto l = node<ListExpr>(p);
            l->tuple = true;
            return l;
          }
          ExprP e = expression();
          if (op(",")) {
            auto l = node<ListExpr>(p);
            l->tuple = true;
            l->items.push_back(std::move(e));
            while (op(",")) {
              ++i;
              if (op(")")) break;
              l->items.push_back(expression());
            }
            e = std::move(l);
          }
          expect_op(")");
          return e;
        }
        if (t.s == "[") {
          auto l = node<ListExpr>(t.pos);
          ++i;
          while (!op("]")) {
            l->items.push_back(expression());
            if (!op(",")) break;
            ++i;
          }
          expect_op("]");
          return l;
        }
        if (t.s == "{") {
          auto d = node<DictExpr>(t.pos);
          ++i;
          while (!op("}")) {
            ExprP k = expression();
            expect_op(":");
            d->items.emplace_back(std::move(k), expression());
            if (!op(",")) break;
            ++i;
          }
          expect_op("}");
          return d;
        }
        break;
      default: break;
    }
    unexpected("an expression");
  }
  ExprP postfix(ExprP e) {
    while (true) {
      if (op(".")) {
        size_t p = cur().pos;
        ++i;
        if (cur().t == T::Int) {
          auto it = node<ItemExpr>(p);
          it->obj = std::move(e);
          auto k = node<Literal>(cur().pos);
          k->v = Value::integer(cur().i);
          it->key = std::move(k);
          ++i;
          e = std::move(it);
          continue;
        }
        auto a = node<AttrExpr>(p);
        a->obj = std::move(e);
        a->name = expect_name("an attribute name");
        e = std::move(a);
      } else if (op("[")) {
        size_t p = cur().pos;
        ++i;
        ExprP parts[3];
        int n = 0;
        bool slice = false;
        while (true) {
          if (op(":")) {
            slice = true;
            ++i;
            if (++n > 2) error("a slice takes at most 3 parts");
            continue;
          }
          if (op("]")) break;
          if (parts[n]) unexpected("':' or ']'");
          parts[n] = expression();
          if (!slice && op(",")) error("tuple subscripts are not supported");
        }
        expect_op("]");
        if (!slice) {
          if (!parts[0]) error_at(p, "empty subscript");
          auto it = node<ItemExpr>(p);
          it->obj = std::move(e);
          it->key = std::move(parts[0]);
          e = std::move(it);
        } else {
          auto s = node<SliceExpr>(p);
          s->obj = std::move(e);
          s->a = std::move(parts[0]);
          s->b = std::move(parts[1]);
          s->c = std::move(parts[2]);
          e = std::move(s);
        }
      } else if (op("(")) {
        auto c = node<CallExpr>(cur().pos);
        c->callee = std::move(e);
        c->args = call_args();
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  CallArgs call_args() {
    CallArgs a;
    expect_op("(");
    while (!op(")")) {
      if (op("*") || op("**")) error("*args / **kwargs in calls are not supported");
      if (cur().t == T::Name && at(1).t == T::Op && at(1).s == "=") {
        std::string k = cur().s;
        i += 2;
        a.kw.emplace_back(k, expression());
      } else {
        if (!a.kw.empty()) error("a positional argument follows keyword arguments");
        a.pos.push_back(expression());
      }
      if (!op(",")) break;
      ++i;
    }
    expect_op(")");
    return a;
  }
  std::string dotted_name(const char* what) {
    std::string n = expect_name(what);
    while (op(".") && at(1).t == T::Name) {
      n += "." + at(1).s;
      i += 2;
    }
    return n;
  }
  ExprP filters(ExprP e) {
    while (true) {
      if (op("|")) {
        ++i;
        size_t p = cur().pos;
        auto f = node<FilterExpr>(p);
        f->name = dotted_name("a filter name");
        f->fn = find_filter(f->name);
        if (!f->fn) error_at(p, fmt::format("unknown filter '{}'", f->name));
        f->obj = std::move(e);
        if (op("(")) f->args = call_args();
        e = std::move(f);
      } else if (name("is")) {
        ++i;
        auto t = node<TestExpr>(cur().pos);
        if (name("not")) {
          t->negated = true;
          ++i;
        }
        size_t p = cur().pos;
        t->name = dotted_name("a test name");
        t->fn = find_test(t->name);
        if (!t->fn) error_at(p, fmt::format("unknown test '{}'", t->name));
        t->obj = std::move(e);
        if (op("(")) {
          t->args = call_args();
        } else if ((cur().t == T::Name || cur().t == T::Str || cur().t == T::Int || cur().t == T::Float || op("[") ||
                    op("{")) &&
                   !name("else") && !name("or") && !name("and")) {
          if (name("is")) error("tests cannot be chained with 'is'");
          t->args.pos.push_back(postfix(primary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }
  // `a, b` (implicit tuple) for set and for.
  ExprP tuple(bool with_condexpr) {
    size_t p = cur().pos;
    ExprP e = with_condexpr ? expression() : or_expr();
    if (!op(",")) return e;
    auto l = node<ListExpr>(p);
    l->tuple = true;
    l->items.push_back(std::move(e));
    while (op(",")) {
      ++i;
      if (cur().t == T::BlockEnd || cur().t == T::VarEnd) break;
      l->items.push_back(with_condexpr ? expression() : or_expr());
    }
    return l;
  }

  // ---- statements ----
  // Parses until one of `ends` opens a block tag (left unconsumed) or, with no
  // ends, the end of the template.
  Body body(std::initializer_list<const char*> ends, const char* opener, size_t opener_pos) {
    Body b;
    while (true) {
      const Tok& t = cur();
      if (t.t == T::Eof) {
        if (ends.size() == 0) return b;
        error_at(opener_pos, fmt::format("unclosed '{{% {} %}}': no '{{% {} %}}' before the end of the template",
                                         opener, *(ends.end() - 1)));
      }
      if (t.t == T::Text) {
        auto s = node<TextStmt>(t.pos);
        s->text = t.s;
        ++i;
        b.push_back(std::move(s));
      } else if (t.t == T::VarBegin) {
        auto s = node<OutputStmt>(t.pos);
        ++i;
        s->e = tuple(true);
        expect(T::VarEnd, "'}}'");
        b.push_back(std::move(s));
      } else if (t.t == T::BlockBegin) {
        const Tok& kw = at(1);
        if (kw.t != T::Name) {
          ++i;
          unexpected("a tag name");
        }
        for (const char* e : ends)
          if (kw.s == e) return b;
        b.push_back(statement());
      } else {
        unexpected("text, '{{' or '{%'");
      }
    }
  }
  void end_tag(const char* name_) {
    expect(T::BlockBegin, "'{%'");
    if (!name(name_)) unexpected(name_);
    ++i;
    expect(T::BlockEnd, "'%}'");
  }
  std::unique_ptr<Stmt> statement() {
    DepthGuard g(*this);
    const size_t p = cur().pos;
    ++i;  // {%
    const std::string kw = cur().s;
    const size_t kwpos = cur().pos;
    ++i;
    if (kw == "if") {
      auto s = node<IfStmt>(p);
      ExprP cond = expression();
      expect(T::BlockEnd, "'%}'");
      while (true) {
        Body b = body({"elif", "else", "endif"}, "if", p);
        s->branches.emplace_back(std::move(cond), std::move(b));
        ++i;  // {%
        std::string which = toks[i++].s;
        if (which == "elif") {
          cond = expression();
          expect(T::BlockEnd, "'%}'");
          continue;
        }
        expect(T::BlockEnd, "'%}'");
        if (which == "else") {
          s->otherwise = body({"endif"}, "if", p);
          end_tag("endif");
        }
        return s;
      }
    }
    if (kw == "for") {
      auto s = node<ForStmt>(p);
      bool paren = op("(");
      if (paren) ++i;
      s->targets.push_back(expect_name("a loop variable"));
      while (op(",")) {
        ++i;
        s->targets.push_back(expect_name("a loop variable"));
      }
      if (paren) expect_op(")");
      if (!name("in")) unexpected("'in'");
      ++i;
      s->iter = tuple(false);
      if (is_content_access(s->iter.get())) impl.iterates_content = true;
      if (name("if")) {
        ++i;
        s->filter = expression();
      }
      if (name("recursive")) error("recursive for loops are not supported");
      expect(T::BlockEnd, "'%}'");
      ++loops;
      s->body = body({"else", "endfor"}, "for", p);
      --loops;
      if (at(1).s == "else") {
        i += 2;
        expect(T::BlockEnd, "'%}'");
        s->otherwise = body({"endfor"}, "for", p);
      }
      end_tag("endfor");
      return s;
    }
    if (kw == "set") {
      auto s = node<SetStmt>(p);
      std::string first = expect_name("a variable name");
      if (op(".")) {
        ++i;
        s->ns_attr = true;
        s->targets = {first, expect_name("an attribute name")};
      } else {
        s->targets.push_back(first);
        while (op(",")) {
          ++i;
          s->targets.push_back(expect_name("a variable name"));
        }
      }
      if (op("=")) {
        ++i;
        s->value = tuple(true);
        expect(T::BlockEnd, "'%}'");
        return s;
      }
      if (op("|")) error("filtered set blocks are not supported");
      if (s->targets.size() != 1 && !s->ns_attr) unexpected("'='");
      expect(T::BlockEnd, "'%}'");
      s->block = body({"endset"}, "set", p);
      end_tag("endset");
      return s;
    }
    if (kw == "macro") {
      auto s = node<MacroDef>(p);
      s->name = expect_name("a macro name");
      expect_op("(");
      while (!op(")")) {
        s->params.push_back(expect_name("a parameter name"));
        if (op("=")) {
          ++i;
          s->defaults.push_back(expression());
        } else {
          s->defaults.push_back(nullptr);
        }
        if (!op(",")) break;
        ++i;
      }
      expect_op(")");
      expect(T::BlockEnd, "'%}'");
      int saved = loops;
      loops = 0;
      s->body = body({"endmacro"}, "macro", p);
      loops = saved;
      end_tag("endmacro");
      return s;
    }
    if (kw == "break" || kw == "continue") {
      if (loops == 0) error_at(kwpos, fmt::format("'{}' outside a for loop", kw));
      auto s = node<LoopCtl>(p);
      s->brk = kw == "break";
      expect(T::BlockEnd, "'%}'");
      return s;
    }
    if (kw == "generation") {
      auto s = node<BlockStmt>(p);
      expect(T::BlockEnd, "'%}'");
      s->body = body({"endgeneration"}, "generation", p);
      end_tag("endgeneration");
      return s;
    }
    static const char* const known_ends[] = {"endif", "endfor", "endset", "endmacro", "endgeneration",
                                             "elif", "else", "endraw", "endcall", "endfilter", "endblock", "endwith"};
    for (const char* e : known_ends)
      if (kw == e) error_at(kwpos, fmt::format("unexpected '{{% {} %}}' with no open block it could close", kw));
    error_at(kwpos, fmt::format("unsupported tag '{{% {} %}}'", kw));
  }
};

std::string normalize_newlines(std::string_view in) {
  std::string s;
  s.reserve(in.size());
  for (size_t k = 0; k < in.size(); ++k) {
    if (in[k] == '\r') {
      s += '\n';
      if (k + 1 < in.size() && in[k + 1] == '\n') ++k;
    } else {
      s += in[k];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();  // keep_trailing_newline=False
  return s;
}

template <class J>
std::string render_impl(const ChatTemplate::Impl& impl, const J& context) {
  if (!context.is_object()) fail("chat template: the render context must be a JSON object");
  Scope root;
  for (auto it = context.begin(); it != context.end(); ++it) root.set(it.key(), from_json(it.value()));
  std::string out;
  Renderer r{impl.src};
  r.out = &out;
  r.scope = &root;
  r.root = &root;
  exec_body(r, impl.body);
  return out;
}

}  // namespace

ChatTemplate ChatTemplate::parse(std::string_view src) {
  auto impl = std::make_shared<Impl>();
  impl->src = normalize_newlines(src);
  Parser p{*impl, impl->src, lex(impl->src)};
  impl->body = p.body({}, "", 0);
  ChatTemplate t;
  t.impl_ = impl;
  return t;
}

std::string ChatTemplate::render(const nlohmann::json& context) const { return render_impl(*impl_, context); }
std::string ChatTemplate::render(const nlohmann::ordered_json& context) const { return render_impl(*impl_, context); }
bool ChatTemplate::uses_variable(std::string_view name) const { return impl_->names.count(name) > 0; }
bool ChatTemplate::iterates_content() const { return impl_->iterates_content; }
const std::string& ChatTemplate::source() const { return impl_->src; }

// ============================================================================
// Model directories
// ============================================================================

namespace {

nlohmann::ordered_json read_json_file(const fs::path& p) {
  std::ifstream in(p);
  if (!in) fail("cannot open {}", p.string());
  try {
    return nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", p.string(), e.what());
  }
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail("cannot open {}", p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

bool has_chat_template(const std::string& model_dir) {
  const fs::path dir(model_dir);
  if (fs::exists(dir / "chat_template.jinja")) return true;
  const fs::path cfg_path = dir / "tokenizer_config.json";
  if (!fs::exists(cfg_path)) return false;
  nlohmann::ordered_json cfg = read_json_file(cfg_path);
  return cfg.is_object() && cfg.contains("chat_template") && !cfg["chat_template"].is_null();
}

ModelChatTemplate load_chat_template(const std::string& model_dir) {
  const fs::path dir(model_dir);
  const fs::path cfg_path = dir / "tokenizer_config.json";
  nlohmann::ordered_json cfg = fs::exists(cfg_path) ? read_json_file(cfg_path) : nlohmann::ordered_json::object();
  if (!cfg.is_object()) fail("{}: not a JSON object", cfg_path.string());
  std::string src;
  bool found = false;
  if (cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
    const auto& ct = cfg["chat_template"];
    if (ct.is_string()) {
      src = ct.get<std::string>();
      found = true;
    } else if (ct.is_array()) {
      std::vector<std::string> names;
      for (const auto& e : ct) {
        if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("template") ||
            !e["template"].is_string())
          fail("{}: chat_template list entries need a string 'name' and 'template'", cfg_path.string());
        names.push_back(e["name"].get<std::string>());
        if (names.back() == "default") {
          src = e["template"].get<std::string>();
          found = true;
        }
      }
      if (!found)
        fail("{}: chat_template lists templates {} but none is named 'default'", cfg_path.string(),
             nlohmann::json(names).dump());
    } else {
      fail("{}: chat_template is neither a string nor a list of named templates", cfg_path.string());
    }
  }
  if (!found && fs::exists(dir / "chat_template.jinja")) {
    src = slurp(dir / "chat_template.jinja");
    found = true;
  }
  if (!found) fail("{}: no chat template (no chat_template in tokenizer_config.json, no chat_template.jinja)", model_dir);
  ModelChatTemplate m{ChatTemplate::parse(src), nlohmann::ordered_json::object()};
  for (const char* k : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    if (!cfg.contains(k)) continue;
    const auto& v = cfg[k];
    if (v.is_string()) m.special_tokens[k] = v.get<std::string>();
    else if (v.is_object() && v.contains("content") && v["content"].is_string())
      m.special_tokens[k] = v["content"].get<std::string>();
  }
  return m;
}

std::string apply_chat_template(const std::string& model_dir, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const nlohmann::ordered_json& extra_context) {
  const ModelChatTemplate m = load_chat_template(model_dir);
  return apply_chat_template(m, messages, add_generation_prompt, extra_context);
}

std::string apply_chat_template(const ModelChatTemplate& m, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const nlohmann::ordered_json& extra_context) {
  if (!messages.is_array()) fail("apply_chat_template: messages must be a JSON array");
  if (!extra_context.is_null() && !extra_context.is_object())
    fail("apply_chat_template: the extra context must be a JSON object");
  if (extra_context.is_object() && extra_context.contains("tools")) {
    const auto& tools = extra_context["tools"];
    if (!tools.is_null() && !(tools.is_array() && tools.empty()) && !m.tmpl.uses_variable("tools"))
      fail("the chat template does not support tools (it never reads 'tools'), but tools were given");
  }
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const auto& msg : messages) {
    if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string())
      fail("apply_chat_template: every message needs a string 'role' (got {})", msg.dump());
    nlohmann::ordered_json copy = msg;
    if (msg.contains("content") && msg["content"].is_array() && !m.tmpl.iterates_content()) {
      std::string text;
      bool first = true;
      for (const auto& part : msg["content"]) {
        if (part.is_string()) {
          text += (first ? "" : "\n") + part.get<std::string>();
        } else if (part.is_object() && part.contains("type") && part["type"] == "text" && part.contains("text") &&
                   part["text"].is_string()) {
          text += (first ? "" : "\n") + part["text"].get<std::string>();
        } else {
          fail("apply_chat_template: content part {} is not supported (only {{\"type\": \"text\", \"text\": ...}})",
               part.dump());
        }
        first = false;
      }
      copy["content"] = text;
    }
    msgs.push_back(std::move(copy));
  }
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  for (auto it = m.special_tokens.begin(); it != m.special_tokens.end(); ++it) ctx[it.key()] = it.value();
  if (extra_context.is_object())
    for (auto it = extra_context.begin(); it != extra_context.end(); ++it) ctx[it.key()] = it.value();
  ctx["messages"] = std::move(msgs);
  ctx["add_generation_prompt"] = add_generation_prompt;
  return m.tmpl.render(ctx);
}

std::string apply_chat_template(const std::string& model_dir, const nlohmann::json& messages,
                                bool add_generation_prompt) {
  return apply_chat_template(model_dir, nlohmann::ordered_json(messages), add_generation_prompt,
                             nlohmann::ordered_json::object());
}

}  // namespace mx
