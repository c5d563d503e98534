#pragma once
// Typed access to the optional and required fields of a JSON object read from
// a user's file (config.json, tokenizer.json, ...). nlohmann's value(key, def)
// throws its own type_error when a field holds the wrong type, which escapes
// as an unexplained exception; these accessors instead fail with mx::Error
// naming the file, the field and what it holds. A field that is absent or
// null takes the default.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"

namespace mx {

class JsonFields {
 public:
  using json = nlohmann::json;
  // `where` names the object in messages ("config.json", "x/tokenizer.json: model").
  JsonFields(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  bool present(const char* k) const { return j_.is_object() && j_.contains(k) && !j_[k].is_null(); }

  int req_int(const char* k) const {
    if (!present(k)) fail("{}: required field '{}' is missing", where_, k);
    return as_int(k);
  }
  int opt_int(const char* k, int def) const { return present(k) ? as_int(k) : def; }
  float opt_float(const char* k, float def) const {
    if (!present(k)) return def;
    if (!j_[k].is_number()) fail("{}: '{}' must be a number, got {}", where_, k, j_[k].dump());
    return j_[k].get<float>();
  }
  bool opt_bool(const char* k, bool def) const {
    if (!present(k)) return def;
    if (!j_[k].is_boolean()) fail("{}: '{}' must be true or false, got {}", where_, k, j_[k].dump());
    return j_[k].get<bool>();
  }
  std::string opt_str(const char* k, const std::string& def) const {
    if (!present(k)) return def;
    if (!j_[k].is_string()) fail("{}: '{}' must be a string, got {}", where_, k, j_[k].dump());
    return j_[k].get<std::string>();
  }
  std::vector<int> opt_int_list(const char* k) const {
    std::vector<int> v;
    if (!present(k)) return v;
    if (!j_[k].is_array()) fail("{}: '{}' must be a list of integers", where_, k);
    for (const auto& x : j_[k]) {
      if (!x.is_number_integer()) fail("{}: '{}' must be a list of integers", where_, k);
      v.push_back(x.get<int>());
    }
    return v;
  }
  // The field itself, or null when absent (any type; the caller checks it).
  const json& opt_any(const char* k) const {
    static const json null_value;
    return j_.is_object() && j_.contains(k) ? j_[k] : null_value;
  }

 private:
  int as_int(const char* k) const {
    const json& v = j_[k];
    if (!v.is_number_integer()) fail("{}: '{}' must be an integer, got {}", where_, k, v.dump());
    const int64_t x = v.get<int64_t>();
    if (x < 0 || x > (1 << 30)) fail("{}: '{}' = {} is out of range", where_, k, x);
    return int(x);
  }
  const json& j_;
  std::string where_;
};

}  // namespace mx
