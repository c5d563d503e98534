#pragma once
// Python's str operations on UTF-8 text, by code points as Python counts them:
// what the string methods and filters of chat templates run on.
// Internal to the Jinja engine.
#include <cstdint>
#include <string>
#include <vector>

#include "chat/jinja_value.h"

namespace mx::jinja {

bool ascii(const std::string& s);                   // no byte >= 0x80
std::vector<uint32_t> cps_of(const std::string& s);  // code points
std::string str_of(const std::vector<uint32_t>& c, size_t b, size_t e);  // code points [b, e) as UTF-8
size_t py_len(const std::string& s);                 // len(s)
bool py_space(uint32_t cp);                          // str.isspace() of one code point

// str.strip / lstrip / rstrip; `chars` None, Undefined or null: whitespace.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right);
// str.split / rsplit; `sep` None, Undefined or null: runs of whitespace.
std::vector<std::string> py_split(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right);
std::string py_lower(const std::string& s);
std::string py_upper(const std::string& s);  // ASCII letters only
std::string py_title(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);

}  // namespace mx::jinja
