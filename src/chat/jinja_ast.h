#pragma once
// The syntax tree the parser builds (chat/jinja_parser.h) and the renderer walks
// (chat/jinja_render.cpp defines every eval / exec). Each node keeps its byte
// offset in the source for error messages. Internal to the Jinja engine.
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_builtins.h"
#include "chat/jinja_renderer.h"
#include "chat/jinja_value.h"

namespace mx::jinja {

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

// Runs the statements in order, one step each; stops at a break or continue.
Flow exec_body(Renderer& r, const Body& b);

// A parsed template: its statements and what ChatTemplate's queries ask of it.
struct Program {
  std::string src;  // newlines normalised; node positions index it
  Body body;
  std::set<std::string, std::less<>> names;  // every variable name read
  bool iterates_content = false;             // a for loop over `content` / x.content / x['content']
};

// ---- expressions ----

struct Literal final : Expr {
  Value v;
  Value eval(Renderer&) const override { return v; }
};
struct NameExpr final : Expr {  // a variable, then a global
  std::string name;
  Value eval(Renderer& r) const override;
};
struct AttrExpr final : Expr {  // obj.name
  ExprP obj;
  std::string name;
  Value eval(Renderer& r) const override;
};
struct ItemExpr final : Expr {  // obj[key]
  ExprP obj, key;
  Value eval(Renderer& r) const override;
};
struct SliceExpr final : Expr {  // obj[a:b:c]
  ExprP obj, a, b, c;
  Value eval(Renderer& r) const override;
};
struct CallArgs {
  std::vector<ExprP> pos;
  std::vector<std::pair<std::string, ExprP>> kw;
  Args eval(Renderer& r) const;
};
struct CallExpr final : Expr {  // callee(args); x.m(args) calls a str / dict method
  ExprP callee;
  CallArgs args;
  Value eval(Renderer& r) const override;
};
struct FilterExpr final : Expr {  // obj | name(args)
  ExprP obj;
  std::string name;
  FilterFn fn = nullptr;
  CallArgs args;
  Value eval(Renderer& r) const override;
};
struct TestExpr final : Expr {  // obj is [not] name(args)
  ExprP obj;
  std::string name;
  TestFn fn = nullptr;
  CallArgs args;
  bool negated = false;
  Value eval(Renderer& r) const override;
};
struct UnaryExpr final : Expr {
  char op;  // '-', '+', '!'
  ExprP e;
  Value eval(Renderer& r) const override;
};
struct BinaryExpr final : Expr {  // arithmetic, ~, and the short-circuit and / or
  std::string op;
  ExprP l, rhs;
  Value eval(Renderer& r) const override;
};
struct CompareExpr final : Expr {  // a < b <= c ...: chained as in Python
  ExprP first;
  std::vector<std::pair<std::string, ExprP>> rest;  // ops: == != < <= > >= in notin
  Value eval(Renderer& r) const override;
};
struct CondExpr final : Expr {  // yes if cond else no (no else: undefined)
  ExprP cond, yes, no;
  Value eval(Renderer& r) const override;
};
struct ListExpr final : Expr {
  std::vector<ExprP> items;
  bool tuple = false;
  Value eval(Renderer& r) const override;
};
struct DictExpr final : Expr {
  std::vector<std::pair<ExprP, ExprP>> items;
  Value eval(Renderer& r) const override;
};

// ---- statements ----

struct TextStmt final : Stmt {
  std::string text;
  Flow exec(Renderer& r) const override;
};
struct OutputStmt final : Stmt {  // {{ e }}
  ExprP e;
  Flow exec(Renderer& r) const override;
};
struct IfStmt final : Stmt {
  std::vector<std::pair<ExprP, Body>> branches;  // if, then each elif
  Body otherwise;
  Flow exec(Renderer& r) const override;
};
struct ForStmt final : Stmt {
  std::vector<std::string> targets;
  ExprP iter, filter;  // filter: the loop's `if`, may be null
  Body body, otherwise;
  Flow exec(Renderer& r) const override;
};
struct SetStmt final : Stmt {
  std::vector<std::string> targets;  // names, or {ns, attr} when ns_attr
  bool ns_attr = false;
  ExprP value;  // null: a set block
  Body block;
  Flow exec(Renderer& r) const override;
};
struct MacroDef final : Stmt {  // defines the macro in the current scope when run
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprP> defaults;  // per param, may be null
  Body body;
  Flow exec(Renderer& r) const override;
};
struct LoopCtl final : Stmt {
  bool brk;
  Flow exec(Renderer&) const override { return brk ? Flow::Break : Flow::Continue; }
};
struct BlockStmt final : Stmt {  // {% generation %}: renders its body
  Body body;
  Flow exec(Renderer& r) const override { return exec_body(r, body); }
};

}  // namespace mx::jinja
