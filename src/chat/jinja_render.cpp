// The renderer: what each node of the syntax tree does when the template runs,
// with Jinja2's semantics where they differ from Python's (a for loop's own
// scope, loop.*, the namespace() escape hatch, macros that see only the
// globals and their arguments).
#include <algorithm>

#include "chat/jinja_ast.h"
#include "chat/jinja_operators.h"
#include "chat/jinja_strings.h"
#include "core/unicode.h"

namespace mx::jinja {

Flow exec_body(Renderer& r, const Body& b) {
  for (const auto& s : b) {
    r.tick(s->pos);
    Flow f = s->exec(r);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

// ---- expressions ----

Value NameExpr::eval(Renderer& r) const {
  if (Value* v = r.scope->find(name)) return *v;
  if (const Value* g = find_global(name)) return *g;
  return Value::undef(name);
}

Value AttrExpr::eval(Renderer& r) const { return get_attr(r, obj->eval(r), name, pos); }

Value ItemExpr::eval(Renderer& r) const {
  Value o = obj->eval(r);
  return get_item(r, o, key->eval(r), pos);
}

Value SliceExpr::eval(Renderer& r) const {
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

Args CallArgs::eval(Renderer& r) const {
  Args a;
  for (const auto& e : pos) a.pos.push_back(e->eval(r));
  for (const auto& [k, e] : kw) a.kw.emplace_back(k, e->eval(r));
  return a;
}

Value CallExpr::eval(Renderer& r) const {
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

Value FilterExpr::eval(Renderer& r) const {
  Value v = obj->eval(r);
  Args a = args.eval(r);
  return fn(r, v, a, pos);
}

Value TestExpr::eval(Renderer& r) const {
  Value v = obj->eval(r);
  Args a = args.eval(r);
  return Value::boolean(fn(r, v, a, pos) != negated);
}

Value UnaryExpr::eval(Renderer& r) const {
  Value v = e->eval(r);
  if (op == '!') return Value::boolean(!truthy(v));
  if (v.k == Value::Undef) r.undefined(v, pos);
  if (!v.numeric()) r.fail(pos, fmt::format("bad operand type for unary {}: '{}'", op, type_name(v)));
  if (op == '+') return v.k == Value::Bool ? Value::integer(v.as_int()) : v;
  if (v.k == Value::Float) return Value::real(-v.f);
  if (v.as_int() == INT64_MIN) r.fail(pos, "integer overflow");
  return Value::integer(-v.as_int());
}

Value BinaryExpr::eval(Renderer& r) const {
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

Value CompareExpr::eval(Renderer& r) const {
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

Value CondExpr::eval(Renderer& r) const {
  if (truthy(cond->eval(r))) return yes->eval(r);
  return no ? no->eval(r) : Value::undef();
}

Value ListExpr::eval(Renderer& r) const {
  List l;
  for (const auto& e : items) l.push_back(e->eval(r));
  Value v = Value::list(std::move(l));
  v.tuple = tuple;
  return v;
}

Value DictExpr::eval(Renderer& r) const {
  auto d = std::make_shared<Dict>();
  for (const auto& [k, v] : items) {
    Value key = k->eval(r);
    if (key.k != Value::Str) r.fail(k->pos, fmt::format("dict keys must be strings here, not {}", type_name(key)));
    d->set(key.s, v->eval(r));
  }
  return Value::map(d);
}

// ---- statements ----

Flow TextStmt::exec(Renderer& r) const {
  r.emit(text, pos);
  return Flow::Normal;
}

Flow OutputStmt::exec(Renderer& r) const {
  r.emit(to_str(e->eval(r)), pos);
  return Flow::Normal;
}

Flow IfStmt::exec(Renderer& r) const {
  for (const auto& [c, body] : branches)
    if (truthy(c->eval(r))) return exec_body(r, body);
  return exec_body(r, otherwise);
}

namespace {

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

}  // namespace

Flow ForStmt::exec(Renderer& r) const {
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

Flow SetStmt::exec(Renderer& r) const {
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

// ---- macros ----

namespace {

// A macro defined by {% macro %}: a callable value over its definition, which
// lives in the template's syntax tree.
struct Macro final : Callable {
  const MacroDef* def;
  explicit Macro(const MacroDef* d);
  Value call(Renderer& r, Args& a, size_t pos) override;
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

}  // namespace

Flow MacroDef::exec(Renderer& r) const {
  Value v;
  v.k = Value::Func;
  v.fn = std::make_shared<Macro>(this);
  r.scope->set(name, v);
  return Flow::Normal;
}

}  // namespace mx::jinja
