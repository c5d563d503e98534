#pragma once
// A JSON Schema validator for the keywords grammar/json_schema.h supports, written
// independently of the grammar (tests check the grammar's outputs with it).
#include <nlohmann/json.hpp>
#include <string>

namespace mxtest {

inline size_t utf8_code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

inline bool digits_at(const std::string& s, size_t i, size_t n) {
  if (i + n > s.size()) return false;
  for (size_t k = 0; k < n; ++k)
    if (s[i + k] < '0' || s[i + k] > '9') return false;
  return true;
}

// Empty when v validates against schema s (root: for $ref); else why not.
inline std::string validate_json(const nlohmann::json& v, const nlohmann::json& s, const nlohmann::json& root) {
  using nlohmann::json;
  if (s.is_boolean()) return s.get<bool>() ? "" : "schema false";
  if (s.contains("$ref")) {
    const std::string r = s["$ref"];
    if (r == "#") return validate_json(v, root, root);
    const std::string name = r.substr(r.find_last_of('/') + 1);
    const char* sec = r.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
    return validate_json(v, root[sec][name], root);
  }
  if (s.contains("const") && v != s["const"]) return "not the const " + s["const"].dump();
  if (s.contains("enum")) {
    bool any = false;
    for (const auto& e : s["enum"]) any |= e == v;
    if (!any) return v.dump() + " not in the enum";
  }
  for (const char* k : {"anyOf", "oneOf"})
    if (s.contains(k)) {
      for (const auto& sub : s[k])
        if (validate_json(v, sub, root).empty()) return "";
      return v.dump() + " matches none of " + k;
    }
  if (s.contains("allOf"))
    for (const auto& sub : s["allOf"])
      if (auto e = validate_json(v, sub, root); !e.empty()) return e;
  if (s.contains("type")) {
    auto is = [&](const std::string& t) {
      return (t == "object" && v.is_object()) || (t == "array" && v.is_array()) || (t == "string" && v.is_string()) ||
             (t == "number" && v.is_number()) || (t == "integer" && v.is_number_integer()) ||
             (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null());
    };
    bool ok = false;
    if (s["type"].is_string()) ok = is(s["type"]);
    else
      for (const auto& t : s["type"]) ok |= is(t);
    if (!ok) return v.dump() + " is not of type " + s["type"].dump();
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const auto& r : s["required"])
        if (!v.contains(r.get<std::string>())) return "missing required " + r.dump();
    const json props = s.value("properties", json::object());
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (props.contains(it.key())) {
        if (auto e = validate_json(it.value(), props[it.key()], root); !e.empty()) return it.key() + ": " + e;
      } else if (!s.contains("additionalProperties") || s["additionalProperties"] == false) {
        if (s.contains("properties") || s.contains("additionalProperties")) return "extra property " + it.key();
      } else if (!s["additionalProperties"].is_boolean()) {
        if (auto e = validate_json(it.value(), s["additionalProperties"], root); !e.empty()) return it.key() + ": " + e;
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return "too few items";
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return "too many items";
    const size_t np = s.contains("prefixItems") ? s["prefixItems"].size() : 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const json& sub = i < np ? s["prefixItems"][i] : s.value("items", json(true));
      if (auto e = validate_json(v[i], sub, root); !e.empty()) return "item " + std::to_string(i) + ": " + e;
    }
  }
  if (v.is_string()) {
    const std::string str = v.get<std::string>();
    const size_t n = utf8_code_points(str);
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return "string too short";
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return "string too long";
    if (s.contains("format")) {
      const std::string f = s["format"];
      const bool date = str.size() >= 10 && digits_at(str, 0, 4) && str[4] == '-' && digits_at(str, 5, 2) &&
                        str[7] == '-' && digits_at(str, 8, 2);
      if (f == "date" && !(date && str.size() == 10)) return str + " is not a date";
      if (f == "uuid") {
        if (str.size() != 36) return str + " is not a uuid";
        for (size_t i = 0; i < 36; ++i)
          if ((i == 8 || i == 13 || i == 18 || i == 23) ? str[i] != '-' : !std::isxdigit((unsigned char)str[i]))
            return str + " is not a uuid";
      }
      if (f == "date-time" && !(date && str.size() > 19 && str[10] == 'T')) return str + " is not a date-time";
    }
  }
  return "";
}

}  // namespace mxtest
