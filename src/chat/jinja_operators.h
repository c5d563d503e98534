#pragma once
// Python's operators on template values: ==, ordering, `in`, iteration,
// arithmetic (integer overflow is an error, not a wrap), attribute and item
// access, slices. Errors name the operation as Python's TypeError would.
// Internal to the Jinja engine.
#include <cstdint>
#include <string>

#include "chat/jinja_renderer.h"
#include "chat/jinja_value.h"

namespace mx::jinja {

bool equals(const Value& a, const Value& b);
// <0, 0, >0; TypeError for unordered types.
int compare(Renderer& r, const Value& a, const Value& b, size_t pos);
bool contains(Renderer& r, const Value& needle, const Value& hay, size_t pos);  // needle in hay
// What `for` iterates: list items, dict keys, string characters.
List iterate(Renderer& r, const Value& v, size_t pos);
// a <op> b for ~ + - * / // % **.
Value binary(Renderer& r, const std::string& op, const Value& a, const Value& b, size_t pos);
// A string or list a template builds is held to the output's limit (kMaxOutput) where it grows:
// n bytes (a list: its items times sizeof(Value)) past it fail at pos.
void check_size(Renderer& r, size_t n, size_t pos);
// The same for s.replace(from, to, count), before it is built.
void check_replace_size(Renderer& r, const std::string& s, const std::string& from, const std::string& to,
                        int64_t count, size_t pos);
Value get_attr(Renderer& r, const Value& obj, const std::string& name, size_t pos);  // obj.name
Value get_item(Renderer& r, const Value& obj, const Value& key, size_t pos);         // obj[key]
// Python slice.indices().
void slice_indices(int64_t len, const Value& a, const Value& b, const Value& c, int64_t& start, int64_t& stop,
                   int64_t& step);

}  // namespace mx::jinja
