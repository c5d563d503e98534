#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "core/error.h"
#include "grammar/regex.h"

namespace mx::grammar {

namespace {

using ojson = nlohmann::ordered_json;
using Seq = std::vector<Element>;

// Keywords that change nothing about which texts validate.
const std::set<std::string> kAnnotations = {"title",   "description", "default",  "examples", "$schema",
                                            "$id",     "$comment",    "deprecated", "readOnly", "writeOnly",
                                            "strict",  "$defs",       "definitions"};
const std::set<std::string> kKeywords = {"type",  "enum",       "const",      "anyOf",      "oneOf",
                                         "allOf", "$ref",       "properties", "required",   "additionalProperties",
                                         "items", "prefixItems", "minItems",  "maxItems",   "minLength",
                                         "maxLength", "format",     "pattern"};
constexpr int kMaxDepth = 64;
constexpr int kMaxRepeat = 4096;  // minItems / maxItems / minLength / maxLength bound
constexpr int kMaxIndent = 20;

Seq cat(std::initializer_list<Seq> parts) {
  Seq s;
  for (const Seq& p : parts) s.insert(s.end(), p.begin(), p.end());
  return s;
}

class Compiler {
 public:
  Compiler(Grammar& grammar, const ojson* root) : g(grammar), root_(root) {}
  Grammar& g;

  Seq R(uint32_t r) { return {Grammar::ref(r)}; }
  Seq L(std::string_view s) { return g.literal(s); }
  Seq B(const ByteSet& s) { return {g.bytes(s)}; }
  uint32_t rule(const std::string& name, const std::vector<Seq>& alts) {
    const uint32_t r = g.add_rule(name);
    for (const Seq& a : alts) g.add_alt(r, a);
    return r;
  }

  // "" | " " | "\n" followed by up to kMaxIndent spaces.
  uint32_t ws() {
    if (ws_ != kNone) return ws_;
    uint32_t ind = rule("indent-" + std::to_string(kMaxIndent), {{}});
    for (int i = kMaxIndent - 1; i >= 0; --i) ind = rule("indent-" + std::to_string(i), {{}, cat({L(" "), R(ind)})});
    return ws_ = rule("ws", {{}, L(" "), cat({L("\n"), R(ind)})});
  }
  uint32_t str_char() {
    if (char_ != kNone) return char_;
    ByteSet plain = ByteSet::range(0x20, 0x7f);
    plain.w['"' >> 6] &= ~(uint64_t(1) << ('"' & 63));
    plain.w['\\' >> 6] &= ~(uint64_t(1) << ('\\' & 63));
    ByteSet esc1;
    for (char c : std::string("\"\\/bfnrt")) esc1.add(uint8_t(c));
    const Seq hex = B(hex_set());
    const uint32_t esc = rule("escape", {B(esc1), cat({L("u"), hex, hex, hex, hex})});
    // One code point of well-formed UTF-8 (Unicode 15, table 3-7): a model's
    // tokens may split characters, but the text they add up to stays valid.
    const Seq cont = B(ByteSet::range(0x80, 0xbf));
    auto r = [&](uint8_t lo, uint8_t hi) { return B(ByteSet::range(lo, hi)); };
    const uint32_t multi = rule("utf8", {cat({r(0xc2, 0xdf), cont}),
                                         cat({r(0xe0, 0xe0), r(0xa0, 0xbf), cont}),
                                         cat({r(0xe1, 0xec), cont, cont}),
                                         cat({r(0xed, 0xed), r(0x80, 0x9f), cont}),
                                         cat({r(0xee, 0xef), cont, cont}),
                                         cat({r(0xf0, 0xf0), r(0x90, 0xbf), cont, cont}),
                                         cat({r(0xf1, 0xf3), cont, cont, cont}),
                                         cat({r(0xf4, 0xf4), r(0x80, 0x8f), cont, cont})});
    return char_ = rule("char", {B(plain), R(multi), cat({L("\\"), R(esc)})});
  }
  static ByteSet hex_set() {
    ByteSet h = ByteSet::range('0', '9');
    h.add_range('a', 'f');
    h.add_range('A', 'F');
    return h;
  }
  uint32_t chars() {
    if (chars_ != kNone) return chars_;
    chars_ = g.add_rule("chars");
    g.add_alt(chars_, cat({R(str_char()), R(chars_)}));
    g.add_alt(chars_, {});
    return chars_;
  }
  uint32_t string_any() {
    if (string_ != kNone) return string_;
    return string_ = rule("string", {cat({L("\""), R(chars()), L("\"")})});
  }
  // Up to n digits ([0-9]{0,n}), as a chain of optional ones.
  uint32_t digits_upto(int n) {
    if (auto it = digits_.find(n); it != digits_.end()) return it->second;
    uint32_t r = rule("digits-0", {{}});
    for (int k = 1; k <= n; ++k) r = rule("digits-" + std::to_string(k), {{}, cat({B(ByteSet::range('0', '9')), R(r)})});
    return digits_[n] = r;
  }
  // Numbers are bounded as llama.cpp's json-schema-to-grammar bounds them (an
  // integral part of at most 16 digits, a fraction of 1 to 16, an exponent of 1 to
  // 3): a model cannot run on digits until max_tokens.
  uint32_t integer() {
    if (integer_ != kNone) return integer_;
    const uint32_t int_part = rule("int-part", {L("0"), cat({B(ByteSet::range('1', '9')), R(digits_upto(15))})});
    const uint32_t neg = rule("neg", {{}, L("-")});
    return integer_ = rule("integer", {cat({R(neg), R(int_part)})});
  }
  uint32_t number() {
    if (number_ != kNone) return number_;
    const Seq d = B(ByteSet::range('0', '9'));
    ByteSet e;
    e.add('e');
    e.add('E');
    const uint32_t frac = rule("frac", {{}, cat({L("."), d, R(digits_upto(15))})});
    const uint32_t sign = rule("exp-sign", {{}, L("+"), L("-")});
    const uint32_t exp = rule("exp", {{}, cat({B(e), R(sign), d, R(digits_upto(2))})});
    return number_ = rule("number", {cat({R(integer()), R(frac), R(exp)})});
  }
  uint32_t boolean() {
    if (bool_ != kNone) return bool_;
    return bool_ = rule("boolean", {L("true"), L("false")});
  }
  uint32_t null() {
    if (null_ != kNone) return null_;
    return null_ = rule("null", {L("null")});
  }
  // Members separated by commas: rest ::= ws "," ws item rest | "".
  uint32_t comma_list(const std::string& name, uint32_t item) {
    const uint32_t rest = g.add_rule(name + "-rest");
    g.add_alt(rest, cat({R(ws()), L(","), R(ws()), R(item), R(rest)}));
    g.add_alt(rest, {});
    return rest;
  }
  uint32_t value_any() {
    if (value_ != kNone) return value_;
    value_ = g.add_rule("value");
    const uint32_t member = rule("member", {cat({R(string_any()), R(ws()), L(":"), R(ws()), R(value_)})});
    const uint32_t obj = rule("object", {cat({L("{"), R(ws()), L("}")}),
                                         cat({L("{"), R(ws()), R(member), R(comma_list("member", member)), R(ws()),
                                              L("}")})});
    const uint32_t arr = rule("array", {cat({L("["), R(ws()), L("]")}),
                                        cat({L("["), R(ws()), R(value_), R(comma_list("element", value_)), R(ws()),
                                             L("]")})});
    for (uint32_t r : {obj, arr, string_any(), number(), boolean(), null()}) g.add_alt(value_, R(r));
    return value_;
  }
  uint32_t compile(const ojson& s, const std::string& path, int depth);

 private:
  static constexpr uint32_t kNone = ~uint32_t(0);
  const ojson* root_;
  std::map<std::string, uint32_t> refs_;
  std::map<int, uint32_t> digits_;
  uint32_t ws_ = kNone, char_ = kNone, chars_ = kNone, string_ = kNone, integer_ = kNone,
           number_ = kNone, bool_ = kNone, null_ = kNone, value_ = kNone;
  int counter_ = 0;

  std::string fresh(const std::string& base) { return base + "-" + std::to_string(counter_++); }
  int get_count(const ojson& s, const char* k, int def, const std::string& path) {
    if (!s.contains(k)) return def;
    const ojson& v = s[k];
    MX_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= kMaxRepeat,
             "json_schema: '{}' at {} must be an integer in [0, {}]", k, path, kMaxRepeat);
    return int(v.get<int64_t>());
  }
  uint32_t ref(const std::string& r, const std::string& path, int depth);
  uint32_t object(const ojson& s, const std::string& path, int depth);
  uint32_t array(const ojson& s, const std::string& path, int depth);
  uint32_t string(const ojson& s, const std::string& path);
  uint32_t typed(const std::string& type, const ojson& s, const std::string& path, int depth);
  uint32_t values(const ojson& s, const std::string& path, int depth);
};

// The schema's "type" as a list (empty: no "type").
std::vector<std::string> types_of(const ojson& s, const std::string& path) {
  std::vector<std::string> types;
  if (!s.contains("type")) return types;
  const ojson& t = s["type"];
  if (t.is_string()) return {t.get<std::string>()};
  MX_CHECK(t.is_array(), "json_schema: 'type' at {} must be a string or an array of strings", path);
  MX_CHECK(!t.empty(), "json_schema: 'type' at {} is an empty array, so it matches nothing", path);
  for (const auto& x : t) {
    MX_CHECK(x.is_string(), "json_schema: 'type' at {} must be a string or an array of strings", path);
    types.push_back(x.get<std::string>());
  }
  return types;
}

bool is_type(const std::string& t, const ojson& v, const std::string& path) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number();
  if (t == "integer") return v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  fail("json_schema: type '{}' at {} is not a JSON Schema type", t, path);
}

// Alternative `alt` (at `at`) of keyword k with the keywords `beside` k added (the same
// keyword in both with different values is refused: their conjunction is not a merge).
ojson with_beside(const ojson& beside, const ojson& alt, const std::string& k, const std::string& at) {
  if (alt.is_boolean() && !alt.get<bool>()) return alt;
  ojson out = alt.is_boolean() ? ojson::object() : alt;
  MX_CHECK(out.is_object(), "json_schema: the schema at {} is not an object", at);
  for (auto it = beside.begin(); it != beside.end(); ++it) {
    if (kAnnotations.count(it.key())) continue;
    if (!out.contains(it.key())) out[it.key()] = it.value();
    else MX_CHECK(out[it.key()] == it.value(), "json_schema: '{}' beside '{}' and at {} differ: not supported", it.key(), k, at);
  }
  return out;
}

bool constrains(const ojson& s) {
  for (auto it = s.begin(); it != s.end(); ++it)
    if (!kAnnotations.count(it.key())) return true;
  return false;
}

uint32_t Compiler::ref(const std::string& r, const std::string& path, int depth) {
  if (auto it = refs_.find(r); it != refs_.end()) return it->second;
  const ojson* target = nullptr;
  if (r == "#") {
    target = root_;
  } else {
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (r.rfind(p, 0) != 0) continue;
      std::string name = r.substr(p.size());
      for (size_t i; (i = name.find("~1")) != std::string::npos;) name.replace(i, 2, "/");
      for (size_t i; (i = name.find("~0")) != std::string::npos;) name.replace(i, 2, "~");
      const std::string section = p.substr(2, p.size() - 3);
      if (root_->is_object() && root_->contains(section) && (*root_)[section].contains(name))
        target = &(*root_)[section][name];
    }
  }
  MX_CHECK(target, "json_schema: $ref '{}' at {} does not resolve (supported: \"#\", \"#/$defs/NAME\", "
                   "\"#/definitions/NAME\")", r, path);
  const uint32_t id = g.add_rule("ref " + r);
  refs_[r] = id;  // before compiling the target: it may refer to itself
  g.add_alt(id, R(compile(*target, r, depth + 1)));
  return id;
}

uint32_t Compiler::string(const ojson& s, const std::string& path) {
  if (s.contains("pattern")) {
    // JSON Schema's pattern searches (ECMA-262, unanchored): any text around
    // the match unless the pattern anchors itself with ^ / $.
    MX_CHECK(s["pattern"].is_string(), "json_schema: 'pattern' at {} must be a string", path);
    MX_CHECK(!s.contains("format") && !s.contains("minLength") && !s.contains("maxLength"),
             "json_schema: 'pattern' together with format, minLength or maxLength at {} is not supported", path);
    const std::string p = s["pattern"].get<std::string>();
    const bool from_start = !p.empty() && p.front() == '^';
    const bool to_end = p.size() >= 2 && p.back() == '$' && p[p.size() - 2] != '\\';
    uint32_t match = 0;
    try {
      match = add_regex(g, p, /*json_string=*/true);
    } catch (const Error& e) {
      fail("json_schema: 'pattern' at {}: {}", path, e.what());
    }
    const Seq before = from_start ? Seq{} : R(chars()), after = to_end ? Seq{} : R(chars());
    return rule(fresh("string-pattern"), {cat({L("\""), before, R(match), after, L("\"")})});
  }
  if (s.contains("format")) {
    MX_CHECK(s["format"].is_string(), "json_schema: 'format' at {} must be a string", path);
    const std::string f = s["format"].get<std::string>();
    const Seq d = B(ByteSet::range('0', '9'));
    auto n_digits = [&](int n) {
      Seq v;
      for (int i = 0; i < n; ++i) v.insert(v.end(), d.begin(), d.end());
      return v;
    };
    const Seq h = B(hex_set());
    auto hexes = [&](int n) {
      Seq v;
      for (int i = 0; i < n; ++i) v.insert(v.end(), h.begin(), h.end());
      return v;
    };
    auto date = [&] {
      const uint32_t month = rule(fresh("month"), {cat({L("0"), B(ByteSet::range('1', '9'))}),
                                                   cat({L("1"), B(ByteSet::range('0', '2'))})});
      const uint32_t day = rule(fresh("day"), {cat({L("0"), B(ByteSet::range('1', '9'))}),
                                               cat({B(ByteSet::range('1', '2')), d}),
                                               cat({L("3"), B(ByteSet::range('0', '1'))})});
      return cat({n_digits(4), L("-"), R(month), L("-"), R(day)});
    };
    auto time = [&] {
      const Seq m60 = cat({B(ByteSet::range('0', '5')), d});
      const uint32_t hour = rule(fresh("hour"), {cat({B(ByteSet::range('0', '1')), d}),
                                                 cat({L("2"), B(ByteSet::range('0', '3'))})});
      const uint32_t frac = rule(fresh("second-fraction"), {{}, cat({L("."), d, R(digits_upto(8))})});
      ByteSet pm;
      pm.add('+');
      pm.add('-');
      const uint32_t zone = rule(fresh("zone"), {L("Z"), cat({B(pm), R(hour), L(":"), m60})});
      return cat({R(hour), L(":"), m60, L(":"), m60, R(frac), R(zone)});
    };
    Seq body;
    if (f == "date") body = date();
    else if (f == "time") body = time();
    else if (f == "date-time") body = cat({date(), L("T"), time()});
    else if (f == "uuid") body = cat({hexes(8), L("-"), hexes(4), L("-"), hexes(4), L("-"), hexes(4), L("-"), hexes(12)});
    else fail("json_schema: string format '{}' at {} is not supported (date, time, date-time, uuid)", f, path);
    MX_CHECK(!s.contains("minLength") && !s.contains("maxLength"),
             "json_schema: minLength / maxLength together with format at {} are not supported", path);
    return rule(fresh("string-" + f), {cat({L("\""), body, L("\"")})});
  }
  const int lo = get_count(s, "minLength", 0, path);
  const int hi = get_count(s, "maxLength", -1, path);
  if (lo == 0 && hi < 0) return string_any();
  MX_CHECK(hi < 0 || hi >= lo, "json_schema: maxLength < minLength at {}", path);
  // Characters lo .. hi as a chain: mandatory ones, then optional ones or any number.
  uint32_t tail = hi < 0 ? chars() : rule(fresh("chars-end"), {{}});
  if (hi >= 0)
    for (int k = hi - 1; k >= lo; --k) tail = rule(fresh("chars-opt"), {{}, cat({R(str_char()), R(tail)})});
  Seq body;
  for (int k = 0; k < lo; ++k) body.push_back(Grammar::ref(str_char()));
  body.push_back(Grammar::ref(tail));
  return rule(fresh("string"), {cat({L("\""), body, L("\"")})});
}

uint32_t Compiler::object(const ojson& s, const std::string& path, int depth) {
  struct Prop {
    std::string key;
    uint32_t value;
    bool required;
  };
  std::set<std::string> required;
  if (s.contains("required")) {
    MX_CHECK(s["required"].is_array(), "json_schema: 'required' at {} must be an array of names", path);
    for (const auto& r : s["required"]) {
      MX_CHECK(r.is_string(), "json_schema: 'required' at {} must be an array of names", path);
      required.insert(r.get<std::string>());
    }
  }
  std::vector<Prop> props;
  if (s.contains("properties")) {
    MX_CHECK(s["properties"].is_object(), "json_schema: 'properties' at {} must be an object", path);
    for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it)
      props.push_back({it.key(), compile(it.value(), path + "/properties/" + it.key(), depth + 1),
                       required.count(it.key()) > 0});
  }
  for (const std::string& r : required) {
    const bool listed = std::any_of(props.begin(), props.end(), [&](const Prop& p) { return p.key == r; });
    if (!listed) props.push_back({r, value_any(), true});
  }
  uint32_t extra_value = kNone;
  if (s.contains("additionalProperties")) {
    const ojson& a = s["additionalProperties"];
    if (a.is_boolean()) extra_value = a.get<bool>() ? value_any() : kNone;
    else extra_value = compile(a, path + "/additionalProperties", depth + 1);
  }
  // tail(after): further members; rest(i, after): members i.. of the list. `after`:
  // a member came before, so the next one is preceded by a comma.
  auto sep = [&](bool after) { return after ? cat({R(ws()), L(","), R(ws())}) : Seq{}; };
  uint32_t tail[2];
  for (int after = 1; after >= 0; --after) {
    if (extra_value == kNone) {
      tail[after] = rule(fresh("members-end"), {{}});
      continue;
    }
    if (after) {
      tail[1] = g.add_rule(fresh("extra-members"));
      g.add_alt(tail[1], cat({sep(true), R(string_any()), R(ws()), L(":"), R(ws()), R(extra_value), R(tail[1])}));
      g.add_alt(tail[1], {});
    } else {
      tail[0] = rule(fresh("extra-members"),
                     {{}, cat({R(string_any()), R(ws()), L(":"), R(ws()), R(extra_value), R(tail[1])})});
    }
  }
  uint32_t next[2] = {tail[0], tail[1]};
  for (size_t i = props.size(); i-- > 0;) {
    const Prop& p = props[i];
    const Seq member = cat({L(ojson(p.key).dump()), R(ws()), L(":"), R(ws()), R(p.value)});
    uint32_t cur[2];
    for (int after = 0; after < 2; ++after) {
      std::vector<Seq> alts = {cat({sep(after), member, R(next[1])})};
      if (!p.required) alts.push_back(R(next[after]));
      cur[after] = rule(fresh("members"), alts);
    }
    next[0] = cur[0];
    next[1] = cur[1];
  }
  return rule(fresh("object"), {cat({L("{"), R(ws()), R(next[0]), R(ws()), L("}")})});
}

uint32_t Compiler::array(const ojson& s, const std::string& path, int depth) {
  std::vector<uint32_t> prefix;
  if (s.contains("prefixItems")) {
    MX_CHECK(s["prefixItems"].is_array(), "json_schema: 'prefixItems' at {} must be an array", path);
    for (size_t i = 0; i < s["prefixItems"].size(); ++i)
      prefix.push_back(compile(s["prefixItems"][i], path + "/prefixItems/" + std::to_string(i), depth + 1));
  }
  uint32_t item = value_any();
  bool more = true;  // items past the prefix allowed
  if (s.contains("items")) {
    if (s["items"].is_boolean()) more = s["items"].get<bool>();
    else item = compile(s["items"], path + "/items", depth + 1);
  }
  const int lo = get_count(s, "minItems", 0, path);
  int hi = get_count(s, "maxItems", -1, path);
  if (!more) hi = hi < 0 ? int(prefix.size()) : std::min(hi, int(prefix.size()));
  MX_CHECK(hi < 0 || hi >= lo, "json_schema: the array at {} cannot hold {} items (maxItems / items: false)", path, lo);
  auto sep = [&](bool first) { return first ? Seq{} : cat({R(ws()), L(","), R(ws())}); };
  // elems(k, first): items k.. ; built from the end. Past max(prefix, minItems) with
  // no maxItems, one repeating rule stands for all further items.
  const int fixed = std::max(int(prefix.size()), lo);
  uint32_t next[2];  // [first][...]: the rule for position k, first or not
  int k_end;
  if (hi < 0) {
    const uint32_t rep = g.add_rule(fresh("items-more"));
    g.add_alt(rep, cat({sep(false), R(item), R(rep)}));
    g.add_alt(rep, {});
    next[0] = rep;
    next[1] = rule(fresh("items-more-first"), {{}, cat({R(item), R(rep)})});
    k_end = fixed;
  } else {
    next[0] = next[1] = rule(fresh("items-end"), {{}});
    k_end = hi;
  }
  for (int k = k_end - 1; k >= 0; --k) {
    const uint32_t it = k < int(prefix.size()) ? prefix[size_t(k)] : item;
    uint32_t cur[2];
    for (int first = 0; first < 2; ++first) {
      std::vector<Seq> alts = {cat({sep(first), R(it), R(next[0])})};
      if (k >= lo) alts.push_back({});
      cur[first] = rule(fresh("items"), alts);
    }
    next[0] = cur[0];
    next[1] = cur[1];
  }
  return rule(fresh("array"), {cat({L("["), R(ws()), R(next[1]), R(ws()), L("]")})});
}

uint32_t Compiler::typed(const std::string& t, const ojson& s, const std::string& path, int depth) {
  if (t == "object") return object(s, path, depth);
  if (t == "array") return array(s, path, depth);
  if (t == "string") return string(s, path);
  if (t == "number") return number();
  if (t == "integer") return integer();
  if (t == "boolean") return boolean();
  if (t == "null") return null();
  fail("json_schema: type '{}' at {} is not a JSON Schema type", t, path);
}

uint32_t Compiler::compile(const ojson& s, const std::string& path, int depth) {
  MX_CHECK(depth < kMaxDepth, "json_schema: nested deeper than {} at {}", kMaxDepth, path);
  if (s.is_boolean()) {
    MX_CHECK(s.get<bool>(), "json_schema: the schema false at {} matches nothing", path);
    return value_any();
  }
  MX_CHECK(s.is_object(), "json_schema: the schema at {} is not an object", path);
  for (auto it = s.begin(); it != s.end(); ++it)
    if (!kAnnotations.count(it.key()) && !kKeywords.count(it.key()))
      fail("json_schema: keyword '{}' at {} is not supported", it.key(), path);
  if (s.contains("const") || s.contains("enum")) return values(s, path, depth);
  // s and anyOf(a_i) is anyOf(s and a_i): the keywords beside anyOf / oneOf / allOf
  // move into each alternative, {"type": "object", "oneOf": [{"required": ["a"]}, ...]}
  // as {"oneOf": [{"type": "object", "required": ["a"]}, ...]}.
  for (const char* k : {"anyOf", "oneOf", "allOf"}) {
    if (!s.contains(k)) continue;
    ojson beside = s;
    beside.erase(k);
    if (!constrains(beside)) break;
    MX_CHECK(s[k].is_array() && !s[k].empty(), "json_schema: '{}' at {} must be a non-empty array", k, path);
    ojson alts = ojson::array();
    for (size_t i = 0; i < s[k].size(); ++i)
      alts.push_back(with_beside(beside, s[k][i], k, path + "/" + k + "/" + std::to_string(i)));
    return compile(ojson{{k, alts}}, path, depth);
  }
  if (s.contains("$ref")) {
    // Compiled alone: a keyword beside it that constrains is refused, not ignored.
    for (auto it = s.begin(); it != s.end(); ++it)
      if (it.key() != "$ref" && !kAnnotations.count(it.key()))
        fail("json_schema: '{}' beside '$ref' at {} is not supported", it.key(), path);
    MX_CHECK(s["$ref"].is_string(), "json_schema: '$ref' at {} must be a string", path);
    return ref(s["$ref"].get<std::string>(), path, depth);
  }
  for (const char* k : {"anyOf", "oneOf"})
    if (s.contains(k)) {
      MX_CHECK(s[k].is_array() && !s[k].empty(), "json_schema: '{}' at {} must be a non-empty array", k, path);
      std::vector<Seq> alts;
      for (size_t i = 0; i < s[k].size(); ++i)
        alts.push_back(R(compile(s[k][i], path + "/" + k + "/" + std::to_string(i), depth + 1)));
      return rule(fresh(k), alts);
    }
  if (s.contains("allOf")) {
    MX_CHECK(s["allOf"].is_array() && s["allOf"].size() == 1,
             "json_schema: 'allOf' at {} with more than one schema is not supported", path);
    return compile(s["allOf"][0], path + "/allOf/0", depth + 1);
  }
  std::vector<std::string> types = types_of(s, path);
  if (types.empty()) {  // implied by the keywords
    if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties"))
      types.push_back("object");
    else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems"))
      types.push_back("array");
    else if (s.contains("minLength") || s.contains("maxLength") || s.contains("format"))
      types.push_back("string");
    else
      return value_any();
  }
  if (types.size() == 1) return typed(types[0], s, path, depth);
  std::vector<Seq> alts;
  for (const std::string& t : types) alts.push_back(R(typed(t, s, path, depth)));
  return rule(fresh("types"), alts);
}

// enum / const: every keyword of a schema applies (2020-12), so only the values that
// the keywords beside them admit are kept: a "type" alone is checked as JSON Schema
// defines it, anything more by matching the value's text on a grammar of the rest,
// so as this compiler reads those keywords (additionalProperties absent = false,
// properties in order, integers without a fraction, 16 digits). None left is an
// error: the schema matches nothing.
uint32_t Compiler::values(const ojson& s, const std::string& path, int depth) {
  std::vector<ojson> vals;
  if (s.contains("enum")) {
    MX_CHECK(s["enum"].is_array() && !s["enum"].empty(), "json_schema: 'enum' at {} must be a non-empty array", path);
    vals.assign(s["enum"].begin(), s["enum"].end());
  }
  if (s.contains("const")) {
    const bool in_enum = !s.contains("enum") || std::find(vals.begin(), vals.end(), s["const"]) != vals.end();
    vals.clear();
    if (in_enum) vals.push_back(s["const"]);
  }
  ojson rest = s;
  rest.erase("enum");
  rest.erase("const");
  std::vector<Seq> alts;
  if (!constrains(rest)) {
    for (const ojson& v : vals) alts.push_back(L(v.dump()));
  } else if (ojson others = rest; others.erase("type") == 1 && !constrains(others)) {
    const std::vector<std::string> types = types_of(rest, path);
    for (const ojson& v : vals)
      if (std::any_of(types.begin(), types.end(), [&](const std::string& t) { return is_type(t, v, path); }))
        alts.push_back(L(v.dump()));
  } else {
    Grammar check;
    Compiler c(check, root_);
    check.finish({Grammar::ref(c.compile(rest, path, depth))});
    for (const ojson& v : vals) {
      Matcher m(check);
      if (m.accept_bytes(v.dump()) && m.complete()) alts.push_back(L(v.dump()));
    }
  }
  MX_CHECK(!alts.empty(), "json_schema: no value of 'enum' / 'const' at {} fits the keywords beside it, so it matches nothing",
           path);
  return rule(fresh("enum"), alts);
}

}  // namespace

uint32_t add_json_schema(Grammar& g, const ojson& schema, const ojson* refs_root) {
  Compiler c(g, refs_root ? refs_root : &schema);
  return c.compile(schema, "#", 0);
}

Grammar json_schema_grammar(const ojson& schema) {
  Grammar g;
  g.finish({Grammar::ref(add_json_schema(g, schema))});
  return g;
}

Grammar json_object_grammar() {
  const ojson schema = {{"type", "object"}, {"additionalProperties", true}};
  return json_schema_grammar(schema);
}

}  // namespace mx::grammar
