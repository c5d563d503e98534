#include "chat/jinja_parser.h"

#include <initializer_list>

#include "chat/jinja_lexer.h"
#include "chat/jinja_source.h"

namespace mx::jinja {

namespace {

constexpr int kMaxParseDepth = 200;  // nesting of expressions and blocks

bool is_content_access(const Expr* e) {
  if (auto* n = dynamic_cast<const NameExpr*>(e)) return n->name == "content";
  if (auto* a = dynamic_cast<const AttrExpr*>(e)) return a->name == "content";
  if (auto* i = dynamic_cast<const ItemExpr*>(e))
    if (auto* k = dynamic_cast<const Literal*>(i->key.get())) return k->v.k == Value::Str && k->v.s == "content";
  return false;
}

struct Parser {
  Program& prog;
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
  // `, name` repeated: the rest of a target list (`for a, b in`, `set a, b =`).
  void more_names(std::vector<std::string>& names, const char* what) {
    while (op(",")) {
      ++i;
      names.push_back(expect_name(what));
    }
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
  // A chain `a + b + c`, `x|f|g`, `m[0][1]`, `a if b if c` builds one node per link, each
  // holding the one before: the tree is as deep as the chain is long, and rendering recurses
  // that deep (30,000 links of '+' overflowed the stack). Each link counts as a level of
  // nesting until the chain ends.
  struct ChainGuard {
    Parser& p;
    int links = 0;
    explicit ChainGuard(Parser& pp) : p(pp) {}
    void link() {
      ++links;
      if (++p.depth > kMaxParseDepth) p.error("the template nests too deeply (a chain of operators, filters or subscripts)");
    }
    ~ChainGuard() { p.depth -= links; }
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
    ChainGuard chain(*this);
    ExprP e = or_expr();
    while (name("if")) {
      chain.link();
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
  ExprP or_expr() { return binop_chain(&Parser::and_expr, {"or"}, T::Name); }
  ExprP and_expr() { return binop_chain(&Parser::not_expr, {"and"}, T::Name); }
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
  // A left-associative chain `next (op next)*`; the operators are Op tokens, or
  // Name tokens for the keywords `and` / `or`.
  ExprP binop_chain(ExprP (Parser::*next)(), std::initializer_list<const char*> ops, T kind = T::Op) {
    ChainGuard chain(*this);
    ExprP l = (this->*next)();
    while (true) {
      const char* found = nullptr;
      for (const char* o : ops)
        if (cur().t == kind && cur().s == o) found = o;
      if (!found) return l;
      chain.link();
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
        prog.names.insert(t.s);
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
    ChainGuard chain(*this);
    while (true) {
      if (op(".") || op("[") || op("(")) chain.link();
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
    ChainGuard chain(*this);
    while (true) {
      if (op("|") || name("is")) chain.link();
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
  // The rest of an opening tag ('%}'), its statements and its `{% end %}` tag.
  Body block_to(const char* end, const char* opener, size_t opener_pos) {
    expect(T::BlockEnd, "'%}'");
    Body b = body({end}, opener, opener_pos);
    end_tag(end);
    return b;
  }
  // {% if %} ... {% elif %} ... {% else %} ... {% endif %}
  std::unique_ptr<Stmt> if_stmt(size_t p) {
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
  // {% for targets in iter [if filter] %} ... [{% else %} ...] {% endfor %}
  std::unique_ptr<Stmt> for_stmt(size_t p) {
    auto s = node<ForStmt>(p);
    bool paren = op("(");
    if (paren) ++i;
    s->targets.push_back(expect_name("a loop variable"));
    more_names(s->targets, "a loop variable");
    if (paren) expect_op(")");
    if (!name("in")) unexpected("'in'");
    ++i;
    s->iter = tuple(false);
    if (is_content_access(s->iter.get())) prog.iterates_content = true;
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
  // {% set targets = value %}, {% set ns.attr = value %}, or a set block
  std::unique_ptr<Stmt> set_stmt(size_t p) {
    auto s = node<SetStmt>(p);
    std::string first = expect_name("a variable name");
    if (op(".")) {
      ++i;
      s->ns_attr = true;
      s->targets = {first, expect_name("an attribute name")};
    } else {
      s->targets.push_back(first);
      more_names(s->targets, "a variable name");
    }
    if (op("=")) {
      ++i;
      s->value = tuple(true);
      expect(T::BlockEnd, "'%}'");
      return s;
    }
    if (op("|")) error("filtered set blocks are not supported");
    if (s->targets.size() != 1 && !s->ns_attr) unexpected("'='");
    s->block = block_to("endset", "set", p);
    return s;
  }
  // {% macro name(params) %} ... {% endmacro %}
  std::unique_ptr<Stmt> macro_def(size_t p) {
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
  std::unique_ptr<Stmt> statement() {
    DepthGuard g(*this);
    const size_t p = cur().pos;
    ++i;  // {%
    const std::string kw = cur().s;
    const size_t kwpos = cur().pos;
    ++i;
    if (kw == "if") return if_stmt(p);
    if (kw == "for") return for_stmt(p);
    if (kw == "set") return set_stmt(p);
    if (kw == "macro") return macro_def(p);
    if (kw == "break" || kw == "continue") {
      if (loops == 0) error_at(kwpos, fmt::format("'{}' outside a for loop", kw));
      auto s = node<LoopCtl>(p);
      s->brk = kw == "break";
      expect(T::BlockEnd, "'%}'");
      return s;
    }
    if (kw == "generation") {
      auto s = node<BlockStmt>(p);
      s->body = block_to("endgeneration", "generation", p);
      return s;
    }
    static const char* const known_ends[] = {"endif", "endfor", "endset", "endmacro", "endgeneration",
                                             "elif", "else", "endraw", "endcall", "endfilter", "endblock", "endwith"};
    for (const char* e : known_ends)
      if (kw == e) error_at(kwpos, fmt::format("unexpected '{{% {} %}}' with no open block it could close", kw));
    error_at(kwpos, fmt::format("unsupported tag '{{% {} %}}'", kw));
  }
};

}  // namespace

void parse(Program& prog) {
  Parser p{prog, prog.src, lex(prog.src)};
  prog.body = p.body({}, "", 0);
}

}  // namespace mx::jinja
