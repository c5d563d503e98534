// The methods of str and dict a template may call (x.strip(), d.items(), ...),
// with Python's semantics on code points; anything else is an error naming it.
#include <algorithm>

#include "chat/jinja_builtins.h"
#include "chat/jinja_operators.h"
#include "chat/jinja_strings.h"
#include "core/unicode.h"

namespace mx::jinja {

std::string need_str(Renderer& r, const Value& v, const char* what, size_t pos) {
  if (v.k == Value::Undef) r.undefined(v, pos);
  if (v.k != Value::Str) r.fail(pos, fmt::format("{} needs a string, not {}", what, type_name(v)));
  return v.s;
}

namespace {

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

}  // namespace

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
    const std::string from = need_str(r, *o, "str.replace()", pos), to = need_str(r, *n, "str.replace()", pos);
    const int64_t count = ar.integer(2, -1);
    check_replace_size(r, s, from, to, count, pos);
    return Value::str(py_replace(s, from, to, count));
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
      check_size(r, out.size(), pos);
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

}  // namespace mx::jinja
