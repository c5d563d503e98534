#pragma once
// The parser: tokens (chat/jinja_lexer.h) to the syntax tree
// (chat/jinja_ast.h), by Jinja2's grammar and operator precedence. Filters and
// tests are looked up here, so an unknown one is a syntax error. Internal to
// the Jinja engine.
#include "chat/jinja_ast.h"

namespace mx::jinja {

// Parses prog.src into prog.body and records the names it reads and whether it
// loops over message content. Syntax errors are an mx::Error with line and column.
void parse(Program& prog);

}  // namespace mx::jinja
