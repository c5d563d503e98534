#include "chat/jinja_operators.h"

#include <algorithm>
#include <cmath>

#include "chat/jinja_strings.h"

namespace mx::jinja {

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

namespace {

template <class Op>
int64_t checked(Renderer& r, Op op, int64_t a, int64_t b, size_t pos) {
  int64_t v = 0;
  if (op(a, b, &v)) r.fail(pos, "integer overflow");
  return v;
}
bool add_ovf(int64_t a, int64_t b, int64_t* v) { return __builtin_add_overflow(a, b, v); }
bool sub_ovf(int64_t a, int64_t b, int64_t* v) { return __builtin_sub_overflow(a, b, v); }
bool mul_ovf(int64_t a, int64_t b, int64_t* v) { return __builtin_mul_overflow(a, b, v); }

}  // namespace

// Doubling a string 40 times (`{% set ns.s = ns.s + ns.s %}`, or with join or replace) asked for a
// terabyte before the output was checked.
void check_size(Renderer& r, size_t n, size_t pos) {
  if (n > kMaxOutput) r.fail(pos, "a string or list larger than the output's limit of 64 MiB");
}

void check_replace_size(Renderer& r, const std::string& s, const std::string& from, const std::string& to,
                        int64_t count, size_t pos) {
  if (to.size() <= from.size()) return;
  size_t n = 0;  // the replacements made
  if (from.empty()) {
    n = py_len(s) + 1;
  } else {
    for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + from.size())) ++n;
  }
  if (count >= 0) n = std::min(n, size_t(count));
  check_size(r, s.size() + n * (to.size() - from.size()), pos);
}

Value binary(Renderer& r, const std::string& op, const Value& a, const Value& b, size_t pos) {
  if (op == "~") {
    std::string x = to_str(a), y = to_str(b);
    check_size(r, x.size() + y.size(), pos);
    return Value::str(std::move(x) + y);
  }
  if (a.k == Value::Undef) r.undefined(a, pos);
  if (b.k == Value::Undef) r.undefined(b, pos);
  auto bad = [&]() -> Value {
    r.fail(pos, fmt::format("unsupported operand types for {}: '{}' and '{}'", op, type_name(a), type_name(b)));
  };
  if (op == "+") {
    if (a.k == Value::Str && b.k == Value::Str) {
      check_size(r, a.s.size() + b.s.size(), pos);
      return Value::str(a.s + b.s);
    }
    if (a.k == Value::Seq && b.k == Value::Seq) {
      check_size(r, (a.l->size() + b.l->size()) * sizeof(Value), pos);
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
    if (seq->k == Value::Seq) unit *= sizeof(Value);
    if (unit && uint64_t(times) > kMaxOutput / unit) r.fail(pos, "repetition result is too large");  // no overflow
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

void slice_indices(int64_t len, const Value& a, const Value& b, const Value& c, int64_t& start, int64_t& stop,
                   int64_t& step) {
  auto given = [](const Value& v) { return v.k != Value::None && v.k != Value::Undef; };
  step = given(c) ? c.as_int() : 1;
  // A given bound counts from the end when negative and is clamped to the
  // sequence (one before its start when stepping backwards).
  auto bound = [&](const Value& v, int64_t missing) {
    if (!given(v)) return missing;
    int64_t x = v.as_int();
    if (x < 0) x += len;
    if (x < 0) x = step < 0 ? -1 : 0;
    if (x >= len) x = step < 0 ? len - 1 : len;
    return x;
  };
  start = bound(a, step < 0 ? len - 1 : 0);
  stop = bound(b, step < 0 ? -1 : len);
}

}  // namespace mx::jinja
