// The globals a chat template sees: Jinja2's range, namespace and dict, and
// the raise_exception and strftime_now transformers adds.
#include <ctime>

#include "chat/jinja_builtins.h"

namespace mx::jinja {

namespace {

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

}  // namespace

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

}  // namespace mx::jinja
