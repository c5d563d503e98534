#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"
#include "core/unicode.h"

namespace mx::jinja {

const char* type_name(const Value& v) {
  switch (v.k) {
    case Value::Undef: return "Undefined";
    case Value::None: return "NoneType";
    case Value::Bool: return "bool";
    case Value::Int: return "int";
    case Value::Float: return "float";
    case Value::Str: return "str";
    case Value::Seq: return "list";
    case Value::Map: return "dict";
    case Value::Ns: return "Namespace";
    case Value::Func: return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.k) {
    case Value::Undef: case Value::None: return false;
    case Value::Bool: return v.b;
    case Value::Int: return v.i != 0;
    case Value::Float: return v.f != 0;
    case Value::Str: return !v.s.empty();
    case Value::Seq: return !v.l->empty();
    case Value::Map: return !v.d->items.empty();
    case Value::Ns: case Value::Func: return true;
  }
  return false;
}

// ---- Python-style text of values ----

// repr(float) / str(float): the shortest round-trip digits, in exponent form
// when the exponent is < -4 or >= 16.
std::string py_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // d.ddde[+-]XX
  size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  int exp = std::stoi(sci.substr(e + 1));
  bool neg = !mant.empty() && mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
  } else if (exp < 0) {
    out += "0." + std::string(size_t(-exp - 1), '0') + digits;
  } else {
    if (digits.size() <= size_t(exp) + 1) {
      out += digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
    }
  }
  return out;
}

std::string py_repr_str(const std::string& s) {
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == uint8_t(q)) out += std::string("\\") + q;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += char(c);
  }
  out += q;
  return out;
}

std::string repr(const Value& v) {
  switch (v.k) {
    case Value::Str: return py_repr_str(v.s);
    case Value::Undef: return "Undefined";
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.k) {
    case Value::Undef: return "";
    case Value::None: return "None";
    case Value::Bool: return v.b ? "True" : "False";
    case Value::Int: return std::to_string(v.i);
    case Value::Float: return py_float(v.f);
    case Value::Str: return v.s;
    case Value::Seq: {
      std::string s = v.tuple ? "(" : "[";
      for (size_t i = 0; i < v.l->size(); ++i) s += (i ? ", " : "") + repr((*v.l)[i]);
      if (v.tuple && v.l->size() == 1) s += ",";
      return s + (v.tuple ? ")" : "]");
    }
    case Value::Map: case Value::Ns: {
      std::string s = v.k == Value::Ns ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, x] : v.d->items) {
        s += (first ? "" : ", ") + py_repr_str(k) + ": " + repr(x);
        first = false;
      }
      return s + (v.k == Value::Ns ? "}>" : "}");
    }
    case Value::Func: return "<function " + (v.fn ? v.fn->name : std::string()) + ">";
  }
  return "";
}

// ---- Python json.dumps ----

namespace {

void json_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    unsigned char c = uint8_t(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20) out += fmt::format("\\u{:04x}", c);
          else out += char(c);
      }
      ++i;
      continue;
    }
    size_t len = std::min(unicode::utf8_len(c), s.size() - i);
    if (!ensure_ascii) {
      out.append(s, i, len);
      i += len;
      continue;
    }
    std::vector<uint32_t> cps = unicode::decode_utf8(std::string_view(s).substr(i, len));
    uint32_t cp = cps.empty() ? unicode::kReplacement : cps[0];
    if (cps.size() != 1) {
      cp = unicode::kReplacement;
      len = 1;
    }
    if (cp >= 0x10000) {
      uint32_t v = cp - 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
    } else {
      out += fmt::format("\\u{:04x}", cp);
    }
    i += len;
  }
  out += '"';
}

}  // namespace

// false: `v` (or something inside it) is not JSON serializable; its type in *bad.
bool dump_json(const Value& v, const JsonOpts& o, int level, std::string& out, std::string* bad) {
  auto newline = [&](int lvl) {
    if (o.indent >= 0) {
      out += '\n';
      out.append(size_t(o.indent) * size_t(lvl), ' ');
    }
  };
  switch (v.k) {
    case Value::None: out += "null"; return true;
    case Value::Bool: out += v.b ? "true" : "false"; return true;
    case Value::Int: out += std::to_string(v.i); return true;
    case Value::Float:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f < 0 ? "-Infinity" : "Infinity";
      else out += py_float(v.f);
      return true;
    case Value::Str: json_string(v.s, o.ensure_ascii, out); return true;
    case Value::Seq: {
      if (v.l->empty()) {
        out += "[]";
        return true;
      }
      out += '[';
      for (size_t i = 0; i < v.l->size(); ++i) {
        if (i) out += o.item_sep;
        newline(level + 1);
        if (!dump_json((*v.l)[i], o, level + 1, out, bad)) return false;
      }
      newline(level);
      out += ']';
      return true;
    }
    case Value::Map: {
      if (v.d->items.empty()) {
        out += "{}";
        return true;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.d->items) items.push_back(&kv);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep;
        newline(level + 1);
        json_string(items[i]->first, o.ensure_ascii, out);
        out += o.key_sep;
        if (!dump_json(items[i]->second, o, level + 1, out, bad)) return false;
      }
      newline(level);
      out += '}';
      return true;
    }
    default:
      *bad = type_name(v);
      return false;
  }
}

namespace {

template <class J>
Value from_json_impl(const J& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      return u > uint64_t(INT64_MAX) ? Value::real(double(u)) : Value::integer(int64_t(u));
    }
    case nlohmann::json::value_t::number_float: return Value::real(j.template get<double>());
    case nlohmann::json::value_t::string: return Value::str(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& e : j) l.push_back(from_json_impl(e));
      return Value::list(std::move(l));
    }
    case nlohmann::json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (auto it = j.begin(); it != j.end(); ++it) d->items.emplace_back(it.key(), from_json_impl(it.value()));
      return Value::map(d);
    }
    default: fail("chat template: binary JSON values are not supported");
  }
}

}  // namespace

Value from_json(const nlohmann::json& j) { return from_json_impl(j); }
Value from_json(const nlohmann::ordered_json& j) { return from_json_impl(j); }

}  // namespace mx::jinja
