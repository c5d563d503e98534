#include "grammar/regex.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace mx::grammar {

namespace {

using Seq = std::vector<Element>;
constexpr int kMaxCount = 1000;

// A character class over ASCII, plus whether it takes every non-ASCII character.
struct CharClass {
  ByteSet ascii;
  bool non_ascii = false;
  void add_class(const CharClass& o) {
    for (int i = 0; i < 4; ++i) ascii.w[i] |= o.ascii.w[i];
    non_ascii = non_ascii || o.non_ascii;
  }
  CharClass negated() const {
    CharClass c;
    for (int b = 0; b < 128; ++b)
      if (!ascii.has(uint8_t(b))) c.ascii.add(uint8_t(b));
    c.non_ascii = !non_ascii;
    return c;
  }
};

CharClass ascii_of(std::initializer_list<std::pair<char, char>> ranges) {
  CharClass c;
  for (auto [lo, hi] : ranges) c.ascii.add_range(uint8_t(lo), uint8_t(hi));
  return c;
}

class Parser {
 public:
  Parser(Grammar& g, std::string_view p, bool json) : g_(g), p_(p), json_(json) {}

  uint32_t parse() {
    if (at('^')) ++i_;
    Seq body = alternation();
    MX_CHECK(i_ == p_.size(), "regex: unexpected '{}' at offset {}", p_[i_], i_);
    const uint32_t r = g_.add_rule("regex");
    g_.add_alt(r, body);
    return r;
  }

 private:
  bool at(char c) const { return i_ < p_.size() && p_[i_] == c; }
  [[noreturn]] void bad(const std::string& what) const { fail("regex: {} at offset {}", what, i_); }
  [[noreturn]] void too_large() const {
    bad(fmt::format("pattern too large: more than {} grammar elements", Grammar::kMaxElements));
  }

  // alternation := concat ('|' concat)*
  // Each production leaves in nullable_ whether what it returned can match "".
  Seq alternation() {
    std::vector<Seq> alts = {concatenation()};
    bool nullable = nullable_;
    size_t held = alts[0].size();
    while (at('|')) {
      ++i_;
      alts.push_back(concatenation());
      nullable = nullable || nullable_;
      if ((held += alts.back().size()) >= Grammar::kMaxElements) too_large();
    }
    nullable_ = nullable;
    if (alts.size() == 1) return alts[0];
    const uint32_t r = g_.add_rule("regex-alt");
    for (const Seq& a : alts) g_.add_alt(r, a);
    return {Grammar::ref(r)};
  }

  Seq concatenation() {
    Seq out;
    bool nullable = true;
    while (i_ < p_.size() && !at('|') && !at(')')) {
      if (at('$') && i_ + 1 == p_.size()) {  // the end: matched anyway
        ++i_;
        break;
      }
      const Seq piece = quantified(atom());
      nullable = nullable && nullable_;
      // Each piece passes quantified's check; pieces side by side add up (128 copies of a
      // 2^20-element piece, a 2 KB pattern, held 2 GB before the grammar saw any).
      if (out.size() + piece.size() >= Grammar::kMaxElements) too_large();
      out.insert(out.end(), piece.begin(), piece.end());
    }
    nullable_ = nullable;
    return out;
  }

  int number() {
    int n = 0, digits = 0;
    while (i_ < p_.size() && p_[i_] >= '0' && p_[i_] <= '9') {
      n = std::min(n * 10 + (p_[i_++] - '0'), kMaxCount + 1);
      ++digits;
    }
    if (!digits) bad("a count expected");
    if (n > kMaxCount) bad(fmt::format("a count over {}", kMaxCount));
    return n;
  }

  Seq quantified(const Seq& x) {
    int lo = 1, hi = 1;  // hi < 0: unbounded
    if (at('*')) lo = 0, hi = -1, ++i_;
    else if (at('+')) lo = 1, hi = -1, ++i_;
    else if (at('?')) lo = 0, hi = 1, ++i_;
    else if (at('{')) {
      ++i_;
      lo = hi = number();
      if (at(',')) {
        ++i_;
        hi = at('}') ? -1 : number();
      }
      if (!at('}')) bad("'}' expected");
      ++i_;
      if (hi >= 0 && hi < lo) bad("{m,n} with n < m");
    } else {
      return x;
    }
    // x* with x matching "" would recurse without consuming input (the matcher's stacks never end).
    if (hi < 0 && nullable_) bad("a '*', '+' or '{m,}' over something that can match nothing (like (a*)*)");
    nullable_ = nullable_ || lo == 0;
    if (at('?')) ++i_;  // lazy: the same language
    if (at('*') || at('+') || at('{')) bad("a quantifier after a quantifier");
    // The copies below, before any reaches the grammar's own limit (nested counts multiply).
    if (x.size() * size_t(std::max(lo, hi)) >= Grammar::kMaxElements)
      bad(fmt::format("pattern too large: a count repeats {} grammar elements {} times (a grammar holds at most {})",
                      x.size(), std::max(lo, hi), Grammar::kMaxElements));
    Seq out;
    for (int k = 0; k < lo; ++k) out.insert(out.end(), x.begin(), x.end());
    if (hi < 0) {
      const uint32_t star = g_.add_rule("regex-star");
      Seq more = x;
      more.push_back(Grammar::ref(star));
      g_.add_alt(star, more);
      g_.add_alt(star, {});
      out.push_back(Grammar::ref(star));
    } else if (hi > lo) {
      // Up to hi - lo more, nested: x (x (x)?)? ...
      uint32_t tail = g_.add_rule("regex-opt");
      g_.add_alt(tail, x);
      g_.add_alt(tail, {});
      for (int k = lo + 1; k < hi; ++k) {
        const uint32_t r = g_.add_rule("regex-opt");
        Seq s = x;
        s.push_back(Grammar::ref(tail));
        g_.add_alt(r, s);
        g_.add_alt(r, {});
        tail = r;
      }
      out.push_back(Grammar::ref(tail));
    }
    return out;
  }

  Seq atom() {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (at('?')) {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') i_ += 2;
        else bad("only (?:...) groups are supported (no lookaround or named groups)");
      }
      Seq inner = alternation();
      if (!at(')')) bad("')' expected");
      ++i_;
      return inner;
    }
    nullable_ = false;  // a character; a group sets it from its inside
    if (c == '[') return char_class(bracket());
    if (c == '.') {
      ++i_;
      return char_class(ascii_of({{'\n', '\n'}, {'\r', '\r'}}).negated());  // ECMAScript: not a line end
    }
    if (c == '\\') {
      ++i_;
      if (i_ >= p_.size()) bad("a trailing '\\'");
      CharClass cls;
      if (class_escape(cls)) return char_class(cls);
      return literal(escaped_char());
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') bad(fmt::format("'{}' with nothing to repeat", c));
    if (c == '^' || c == '$') bad("'^' and '$' are only supported at the start and the end");
    // A literal: one UTF-8 character, whole.
    size_t len = 1;
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0xF0) len = 4;
    else if (b >= 0xE0) len = 3;
    else if (b >= 0xC0) len = 2;
    if (i_ + len > p_.size()) bad("a truncated UTF-8 character");
    const std::string ch(p_.substr(i_, len));
    i_ += len;
    return literal(ch);
  }

  // \d \w \s and their complements; false for other escapes (i_ unchanged).
  bool class_escape(CharClass& out) {
    const char e = p_[i_];
    CharClass c;
    switch (e) {
      case 'd': case 'D': c = ascii_of({{'0', '9'}}); break;
      case 'w': case 'W': c = ascii_of({{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'_', '_'}}); break;
      case 's': case 'S': c = ascii_of({{' ', ' '}, {'\t', '\r'}}); break;
      default: return false;
    }
    ++i_;
    out = (e >= 'A' && e <= 'Z') ? c.negated() : c;
    return true;
  }

  // The character an escape stands for (after the '\'), as UTF-8.
  std::string escaped_char() {
    const char e = p_[i_++];
    switch (e) {
      case 'n': return "\n";
      case 'r': return "\r";
      case 't': return "\t";
      case 'f': return "\f";
      case 'v': return "\v";
      case 'u': {
        if (i_ + 4 > p_.size()) bad("\\u needs four hex digits");
        unsigned cp = 0;
        for (int k = 0; k < 4; ++k) {
          const char h = p_[i_++];
          cp <<= 4;
          if (h >= '0' && h <= '9') cp |= unsigned(h - '0');
          else if (h >= 'a' && h <= 'f') cp |= unsigned(h - 'a' + 10);
          else if (h >= 'A' && h <= 'F') cp |= unsigned(h - 'A' + 10);
          else bad("\\u needs four hex digits");
        }
        if (cp >= 0xD800 && cp < 0xE000) bad("a surrogate \\u escape");
        std::string s;
        if (cp < 0x80) s += char(cp);
        else if (cp < 0x800) s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 63));
        else s += char(0xE0 | (cp >> 12)), s += char(0x80 | ((cp >> 6) & 63)), s += char(0x80 | (cp & 63));
        return s;
      }
      default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
          bad(fmt::format("the escape \\{} is not supported", e));
        return std::string(1, e);  // escaped punctuation stands for itself
    }
  }

  // [...] after the '['.
  CharClass bracket() {
    ++i_;
    const bool negate = at('^');
    if (negate) ++i_;
    CharClass c;
    bool first = true;
    while (i_ < p_.size() && (!at(']') || first)) {
      first = false;
      int lo;
      if (at('\\')) {
        ++i_;
        if (i_ >= p_.size()) bad("a trailing '\\'");
        CharClass esc;
        if (class_escape(esc)) {
          c.add_class(esc);
          continue;
        }
        const std::string ch = escaped_char();
        if (ch.size() != 1) bad("non-ASCII characters in a class are not supported");
        lo = static_cast<unsigned char>(ch[0]);
      } else {
        lo = static_cast<unsigned char>(p_[i_++]);
        if (lo >= 0x80) bad("non-ASCII characters in a class are not supported");
      }
      int hi = lo;
      if (at('-') && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        if (at('\\')) {
          ++i_;
          const std::string ch = escaped_char();
          if (ch.size() != 1) bad("non-ASCII characters in a class are not supported");
          hi = static_cast<unsigned char>(ch[0]);
        } else {
          hi = static_cast<unsigned char>(p_[i_++]);
          if (hi >= 0x80) bad("non-ASCII characters in a class are not supported");
        }
        if (hi < lo) bad("a class range out of order");
      }
      c.ascii.add_range(uint8_t(lo), uint8_t(hi));
    }
    if (!at(']')) bad("']' expected");
    ++i_;
    return negate ? c.negated() : c;
  }

  // Bytes of the output for one character of the matched text (JSON escapes it).
  std::vector<std::string> spellings(uint8_t ascii) const {
    if (!json_) return {std::string(1, char(ascii))};
    if (ascii == '"') return {"\\\""};
    if (ascii == '\\') return {"\\\\"};
    if (ascii < 0x20) return {};  // never in a JSON string's text
    return {std::string(1, char(ascii))};
  }

  Seq literal(const std::string& ch) {
    if (ch.size() > 1 || !json_) return g_.literal(ch);
    const auto sp = spellings(uint8_t(ch[0]));
    if (sp.empty()) bad("a control character cannot occur in a JSON string");
    return g_.literal(sp[0]);
  }

  Seq char_class(const CharClass& c) {
    ByteSet plain;
    const uint32_t r = g_.add_rule("regex-class");
    for (int b = 0; b < 128; ++b) {
      if (!c.ascii.has(uint8_t(b))) continue;
      if (json_ && (b == '"' || b == '\\')) {
        g_.add_alt(r, g_.literal(spellings(uint8_t(b))[0]));
      } else if (!json_ || b >= 0x20) {
        plain.add(uint8_t(b));
      }
    }
    bool any_plain = false;
    for (uint64_t w : plain.w) any_plain = any_plain || w;
    if (any_plain) g_.add_alt(r, {g_.bytes(plain)});
    if (c.non_ascii) {
      // Well-formed UTF-8 of U+0080 and up (RFC 3629's table, surrogates excluded).
      const ByteSet cont = ByteSet::range(0x80, 0xBF);
      g_.add_alt(r, {g_.bytes(ByteSet::range(0xC2, 0xDF)), g_.bytes(cont)});
      g_.add_alt(r, {g_.bytes(ByteSet::of(0xE0)), g_.bytes(ByteSet::range(0xA0, 0xBF)), g_.bytes(cont)});
      g_.add_alt(r, {g_.bytes(ByteSet::range(0xE1, 0xEC)), g_.bytes(cont), g_.bytes(cont)});
      g_.add_alt(r, {g_.bytes(ByteSet::of(0xED)), g_.bytes(ByteSet::range(0x80, 0x9F)), g_.bytes(cont)});
      g_.add_alt(r, {g_.bytes(ByteSet::range(0xEE, 0xEF)), g_.bytes(cont), g_.bytes(cont)});
      g_.add_alt(r,
                 {g_.bytes(ByteSet::of(0xF0)), g_.bytes(ByteSet::range(0x90, 0xBF)), g_.bytes(cont), g_.bytes(cont)});
      g_.add_alt(r, {g_.bytes(ByteSet::range(0xF1, 0xF3)), g_.bytes(cont), g_.bytes(cont), g_.bytes(cont)});
      g_.add_alt(r,
                 {g_.bytes(ByteSet::of(0xF4)), g_.bytes(ByteSet::range(0x80, 0x8F)), g_.bytes(cont), g_.bytes(cont)});
    }
    if (g_.alternatives(r).empty()) bad("a class that matches nothing");
    return {Grammar::ref(r)};
  }

  Grammar& g_;
  std::string_view p_;
  bool json_;
  size_t i_ = 0;
  bool nullable_ = false;
};

}  // namespace

uint32_t add_regex(Grammar& g, std::string_view pattern, bool json_string) {
  return Parser(g, pattern, json_string).parse();
}

Grammar regex_grammar(std::string_view pattern) {
  Grammar g;
  g.finish({Grammar::ref(add_regex(g, pattern))});
  return g;
}

}  // namespace mx::grammar
