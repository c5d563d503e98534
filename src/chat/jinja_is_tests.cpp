// Tests (x is name(args)): Jinja2's built-in tests and their aliases.
#include "chat/jinja_builtins.h"
#include "chat/jinja_operators.h"
#include "chat/jinja_strings.h"

namespace mx::jinja {

namespace {

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

}  // namespace

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

bool run_test(Renderer& r, const std::string& name, const Value& v, Args& a, size_t pos) {
  TestFn t = find_test(name);
  if (!t) r.fail(pos, fmt::format("unknown test '{}'", name));
  return t(r, v, a, pos);
}

}  // namespace mx::jinja
