#include "chat/jinja_lexer.h"

#include <cctype>
#include <charconv>
#include <string_view>

#include "chat/jinja_source.h"
#include "core/unicode.h"

namespace mx::jinja {

namespace {

bool ws_char(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Python's unicode_escape, as Jinja applies it to string literals.
std::string unescape(const std::string& src, size_t b, size_t e, size_t pos) {
  std::string out;
  auto hex = [&](size_t at, size_t n) -> uint32_t {
    if (at + n > e) fail_at(src, pos, "truncated \\x/\\u escape in a string literal");
    uint32_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      char c = src[at + k];
      int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) fail_at(src, pos, "bad hex digit in a string literal escape");
      v = v * 16 + uint32_t(d);
    }
    return v;
  };
  for (size_t i = b; i < e; ++i) {
    char c = src[i];
    if (c != '\\' || i + 1 >= e) {
      out += c;
      continue;
    }
    char n = src[++i];
    switch (n) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\n': break;
      case 'x': unicode::append_utf8(out, hex(i + 1, 2)); i += 2; break;
      case 'u': unicode::append_utf8(out, hex(i + 1, 4)); i += 4; break;
      case 'U': {
        uint32_t cp = hex(i + 1, 8);
        if (cp > 0x10FFFF) fail_at(src, pos, "\\U escape out of range");
        unicode::append_utf8(out, cp);
        i += 8;
        break;
      }
      default:
        if (n >= '0' && n <= '7') {
          uint32_t v = 0;
          size_t k = 0;
          for (; k < 3 && i + k < e && src[i + k] >= '0' && src[i + k] <= '7'; ++k) v = v * 8 + uint32_t(src[i + k] - '0');
          unicode::append_utf8(out, v);
          i += k - 1;
        } else {
          out += '\\';
          out += n;
        }
    }
  }
  return out;
}

}  // namespace

std::vector<Tok> lex(const std::string& src) {
  std::vector<Tok> out;
  const size_t n = src.size();
  size_t pos = 0;
  bool line_starting = true;
  auto after_tag = [&](size_t& p, bool minus, bool plus, bool block) {
    size_t start = p;
    if (minus) {
      while (p < n && ws_char(src[p])) ++p;
    } else if (block && !plus && p < n && src[p] == '\n') {
      ++p;  // trim_blocks
    }
    line_starting = p > start && src[p - 1] == '\n';
  };
  while (true) {
    size_t tag = pos;
    char kind = 0;
    while (true) {
      tag = src.find('{', tag);
      if (tag == std::string::npos || tag + 1 >= n) {
        tag = std::string::npos;
        break;
      }
      char c = src[tag + 1];
      if (c == '{' || c == '%' || c == '#') {
        kind = c;
        break;
      }
      ++tag;
    }
    std::string text = src.substr(pos, (tag == std::string::npos ? n : tag) - pos);
    if (tag == std::string::npos) {
      if (!text.empty()) out.push_back({T::Text, std::move(text), 0, 0, pos});
      break;
    }
    const char mod = tag + 2 < n ? src[tag + 2] : 0;
    const bool minus = mod == '-', plus = mod == '+' && kind != '{';
    if (minus) {
      while (!text.empty() && ws_char(text.back())) text.pop_back();
    } else if (kind != '{' && !plus) {  // lstrip_blocks
      size_t nl = text.rfind('\n');
      size_t lpos = nl == std::string::npos ? 0 : nl + 1;
      if ((lpos > 0 || line_starting) && text.find_first_not_of(" \t", lpos) == std::string::npos) text.resize(lpos);
    }
    if (!text.empty()) out.push_back({T::Text, std::move(text), 0, 0, pos});
    size_t p = tag + 2 + ((minus || plus) ? 1 : 0);
    if (kind == '#') {
      size_t e = src.find("#}", p);
      if (e == std::string::npos) fail_at(src, tag, "unclosed comment '{#' (no matching '#}')");
      bool emin = e > p && src[e - 1] == '-', eplus = e > p && src[e - 1] == '+';
      p = e + 2;
      after_tag(p, emin, eplus, true);
      pos = p;
      continue;
    }
    const char* close = kind == '{' ? "}}" : "%}";
    const char* what = kind == '{' ? "'{{' (no matching '}}')" : "'{%' (no matching '%}')";
    out.push_back({kind == '{' ? T::VarBegin : T::BlockBegin, "", 0, 0, tag});
    size_t begin_tok = out.size();
    bool emin = false, eplus = false;
    std::string brackets;  // open ( [ {: a tag only ends where they are balanced, as in Jinja
    while (true) {
      while (p < n && ws_char(src[p])) ++p;
      if (p >= n) fail_at(src, tag, std::string("unclosed ") + what);
      if (!brackets.empty()) {
        // inside brackets "}}" is two closing braces
      } else if (src.compare(p, 2, close) == 0) {
        p += 2;
        break;
      }
      if (brackets.empty() && (src[p] == '-' || (src[p] == '+' && kind == '%')) && src.compare(p + 1, 2, close) == 0) {
        (src[p] == '-' ? emin : eplus) = true;
        p += 3;
        break;
      }
      const size_t tp = p;
      char c = src[p];
      if (std::isalpha(uint8_t(c)) || c == '_') {
        size_t e = p;
        while (e < n && (std::isalnum(uint8_t(src[e])) || src[e] == '_')) ++e;
        out.push_back({T::Name, src.substr(p, e - p), 0, 0, tp});
        p = e;
      } else if (std::isdigit(uint8_t(c))) {
        size_t e = p;
        while (e < n && (std::isdigit(uint8_t(src[e])) || src[e] == '_')) ++e;
        bool is_float = false;
        if (e + 1 < n && src[e] == '.' && std::isdigit(uint8_t(src[e + 1]))) {
          is_float = true;
          ++e;
          while (e < n && (std::isdigit(uint8_t(src[e])) || src[e] == '_')) ++e;
        }
        if (e < n && (src[e] == 'e' || src[e] == 'E')) {
          size_t x = e + 1;
          if (x < n && (src[x] == '+' || src[x] == '-')) ++x;
          if (x < n && std::isdigit(uint8_t(src[x]))) {
            is_float = true;
            e = x;
            while (e < n && std::isdigit(uint8_t(src[e]))) ++e;
          }
        }
        std::string num;
        for (size_t k = p; k < e; ++k)
          if (src[k] != '_') num += src[k];
        Tok t{is_float ? T::Float : T::Int, num, 0, 0, tp};
        if (is_float) {
          t.f = std::strtod(num.c_str(), nullptr);
        } else {
          auto res = std::from_chars(num.data(), num.data() + num.size(), t.i);
          if (res.ec != std::errc()) fail_at(src, tp, "integer literal out of range");
        }
        out.push_back(std::move(t));
        p = e;
      } else if (c == '\'' || c == '"') {
        size_t e = p + 1;
        while (e < n && src[e] != c) e += src[e] == '\\' ? 2 : 1;
        if (e >= n) fail_at(src, tp, "unterminated string literal");
        out.push_back({T::Str, unescape(src, p + 1, e, tp), 0, 0, tp});
        p = e + 1;
      } else {
        static const char* const ops2[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* o : ops2)
          if (src.compare(p, 2, o) == 0) op = o;
        if (op.empty() && std::string_view("+-*/%~<>=()[]{},.:|").find(c) != std::string_view::npos) op = std::string(1, c);
        if (op.empty()) fail_at(src, tp, fmt::format("unexpected character '{}'", c));
        if (op == "(" || op == "[" || op == "{") {
          brackets += op == "(" ? ')' : op == "[" ? ']' : '}';
        } else if (op == ")" || op == "]" || op == "}") {
          if (brackets.empty()) fail_at(src, tp, fmt::format("unexpected '{}'", op));
          if (brackets.back() != op[0]) fail_at(src, tp, fmt::format("unexpected '{}', expected '{}'", op, brackets.back()));
          brackets.pop_back();
        }
        out.push_back({T::Op, op, 0, 0, tp});
        p += op.size();
      }
    }
    out.push_back({kind == '{' ? T::VarEnd : T::BlockEnd, "", 0, 0, p - 2});
    // {% raw %} ... {% endraw %}: the text in between, verbatim.
    if (kind == '%' && out.size() == begin_tok + 2 && out[begin_tok].t == T::Name && out[begin_tok].s == "raw") {
      out.resize(begin_tok - 1);
      size_t body = p;
      after_tag(body, emin, eplus, true);
      size_t s = body;
      while (true) {
        s = src.find("{%", s);
        if (s == std::string::npos) fail_at(src, tag, "unclosed '{% raw %}' (no '{% endraw %}')");
        size_t q = s + 2;
        bool rmin = q < n && src[q] == '-';
        if (q < n && (src[q] == '-' || src[q] == '+')) ++q;
        while (q < n && ws_char(src[q])) ++q;
        if (src.compare(q, 6, "endraw") != 0) {
          s += 2;
          continue;
        }
        q += 6;
        while (q < n && ws_char(src[q])) ++q;
        bool qmin = false, qplus = false;
        if (q < n && (src[q] == '-' || src[q] == '+')) (src[q] == '-' ? qmin : qplus) = true, ++q;
        if (src.compare(q, 2, "%}") != 0) fail_at(src, s, "malformed '{% endraw %}'");
        std::string raw = src.substr(body, s - body);
        if (rmin)
          while (!raw.empty() && ws_char(raw.back())) raw.pop_back();
        if (!raw.empty()) out.push_back({T::Text, std::move(raw), 0, 0, body});
        p = q + 2;
        after_tag(p, qmin, qplus, true);
        break;
      }
      pos = p;
      continue;
    }
    after_tag(p, emin, eplus, kind == '%');
    pos = p;
  }
  out.push_back({T::Eof, "", 0, 0, n});
  return out;
}

}  // namespace mx::jinja
