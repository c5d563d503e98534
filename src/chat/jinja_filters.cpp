// Filters (x | name(args)): Jinja2's built-in filters as the sandbox runs them,
// tojson as transformers defines it.
#include <algorithm>
#include <charconv>
#include <cmath>

#include "chat/jinja_builtins.h"
#include "chat/jinja_operators.h"
#include "chat/jinja_strings.h"

namespace mx::jinja {

namespace {

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

int64_t py_len_of(Renderer& r, const Value& v, size_t pos) {
  switch (v.k) {
    case Value::Undef: return 0;
    case Value::Str: return int64_t(py_len(v.s));
    case Value::Seq: return int64_t(v.l->size());
    case Value::Map: case Value::Ns: return int64_t(v.d->items.size());
    default: r.fail(pos, fmt::format("object of type '{}' has no len()", type_name(v)));
  }
}

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
  const int64_t indent = ar.integer(1, -1);
  if (indent > 1000 || indent < -1) r.fail(pos, fmt::format("tojson(): indent {} is not in [-1, 1000]", indent));
  o.indent = int(indent);
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
// A filter of no arguments that maps str(v) through `f` (none: str(v) itself).
Value text_filter(Renderer& r, const Value& v, Args& a, size_t pos, const char* name,
                  std::string (*f)(const std::string&)) {
  ArgReader{r, a, pos, name, {}}.check();
  std::string s = to_str(v);
  return Value::str(f ? f(s) : std::move(s));
}
Value f_string(Renderer& r, const Value& v, Args& a, size_t pos) { return text_filter(r, v, a, pos, "string", nullptr); }
Value f_lower(Renderer& r, const Value& v, Args& a, size_t pos) { return text_filter(r, v, a, pos, "lower", py_lower); }
Value f_upper(Renderer& r, const Value& v, Args& a, size_t pos) { return text_filter(r, v, a, pos, "upper", py_upper); }
Value f_capitalize(Renderer& r, const Value& v, Args& a, size_t pos) {
  return text_filter(r, v, a, pos, "capitalize", py_capitalize);
}
Value f_title(Renderer& r, const Value& v, Args& a, size_t pos) { return text_filter(r, v, a, pos, "title", py_title); }
Value f_replace(Renderer& r, const Value& v, Args& a, size_t pos) {
  ArgReader ar{r, a, pos, "replace", {"old", "new", "count"}};
  ar.check();
  const Value* o = ar.get(0);
  const Value* n = ar.get(1);
  if (!o || !n) r.fail(pos, "replace() needs old and new");
  const std::string s = to_str(v), from = to_str(*o), to = to_str(*n);
  const int64_t count = ar.integer(2, -1);
  check_replace_size(r, s, from, to, count, pos);
  return Value::str(py_replace(s, from, to, count));
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
    check_size(r, out.size(), pos);
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
  // Outside int64 (1e300): the default, as for inf and NaN (the cast would be undefined).
  if (v.k == Value::Float)
    return Value::integer(std::isfinite(v.f) && std::fabs(v.f) < 0x1p63 ? int64_t(v.f) : def);
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
  else {
    const int64_t width = ar.integer(0, 4);
    if (width > 1000) r.fail(pos, fmt::format("indent(): width {} is over 1000", width));
    pad = std::string(size_t(std::max<int64_t>(width, 0)), ' ');
  }
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

}  // namespace

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

}  // namespace mx::jinja
