#include "chat/jinja_strings.h"

#include <algorithm>
#include <cctype>

#include "core/unicode.h"

namespace mx::jinja {

bool ascii(const std::string& s) {
  for (char c : s)
    if (uint8_t(c) >= 0x80) return false;
  return true;
}
std::vector<uint32_t> cps_of(const std::string& s) { return unicode::decode_utf8(s); }
std::string str_of(const std::vector<uint32_t>& c, size_t b, size_t e) {
  return b >= e ? std::string() : unicode::encode_utf8(c.data() + b, e - b);
}
size_t py_len(const std::string& s) { return ascii(s) ? s.size() : cps_of(s).size(); }
bool py_space(uint32_t cp) { return unicode::is_whitespace(cp) || (cp >= 0x1c && cp <= 0x1f); }

std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::vector<uint32_t> c = cps_of(s);
  std::vector<uint32_t> set;
  bool ws = !chars || chars->k == Value::None || chars->k == Value::Undef;
  if (!ws) set = cps_of(chars->s);
  auto strip_me = [&](uint32_t cp) {
    return ws ? py_space(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t b = 0, e = c.size();
  if (left)
    while (b < e && strip_me(c[b])) ++b;
  if (right)
    while (e > b && strip_me(c[e - 1])) --e;
  return str_of(c, b, e);
}

std::vector<std::string> py_split(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (!sep || sep->k == Value::None || sep->k == Value::Undef) {
    std::vector<uint32_t> c = cps_of(s);
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < c.size()) {
      while (i < c.size() && py_space(c[i])) ++i;
      if (i >= c.size()) break;
      size_t b = i;
      while (i < c.size() && !py_space(c[i])) ++i;
      words.emplace_back(b, i);
    }
    if (maxsplit < 0 || size_t(maxsplit) >= words.size() || words.empty()) {
      for (auto [b, e] : words) out.push_back(str_of(c, b, e));
      return out;
    }
    // With a limit the remainder keeps its inner whitespace (trailing/leading stripped).
    if (!from_right) {
      for (size_t w = 0; w < size_t(maxsplit); ++w) out.push_back(str_of(c, words[w].first, words[w].second));
      out.push_back(str_of(c, words[size_t(maxsplit)].first, words.back().second));
    } else {
      size_t keep = words.size() - size_t(maxsplit);
      out.push_back(str_of(c, words[0].first, words[keep - 1].second));
      for (size_t w = keep; w < words.size(); ++w) out.push_back(str_of(c, words[w].first, words[w].second));
    }
    return out;
  }
  const std::string& d = sep->s;
  if (!from_right) {
    size_t pos = 0;
    int64_t n = 0;
    while (maxsplit < 0 || n < maxsplit) {
      size_t m = s.find(d, pos);
      if (m == std::string::npos) break;
      out.push_back(s.substr(pos, m - pos));
      pos = m + d.size();
      ++n;
    }
    out.push_back(s.substr(pos));
  } else {
    size_t end = s.size();
    int64_t n = 0;
    std::vector<std::string> rev;
    while (maxsplit < 0 || n < maxsplit) {
      if (end < d.size()) break;
      size_t m = s.rfind(d, end - d.size());
      if (m == std::string::npos) break;
      rev.push_back(s.substr(m + d.size(), end - m - d.size()));
      end = m;
      ++n;
    }
    rev.push_back(s.substr(0, end));
    out.assign(rev.rbegin(), rev.rend());
  }
  return out;
}

std::string py_lower(const std::string& s) {
  if (ascii(s)) {
    std::string o = s;
    for (char& c : o)
      if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    return o;
  }
  std::vector<uint32_t> c = cps_of(s);
  for (uint32_t& cp : c) cp = unicode::to_lower(cp);
  return str_of(c, 0, c.size());
}
std::string py_upper(const std::string& s) {  // ASCII letters only
  std::string o = s;
  for (char& c : o)
    if (c >= 'a' && c <= 'z') c = char(c - 'a' + 'A');
  return o;
}
namespace {
bool is_ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
}  // namespace

std::string py_title(const std::string& s) {
  std::string o = s;
  bool prev_cased = false;
  for (char& c : o) {
    if (is_ascii_alpha(c)) {
      c = prev_cased ? char(std::tolower(uint8_t(c))) : char(std::toupper(uint8_t(c)));
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return o;
}
std::string py_capitalize(const std::string& s) {
  std::string o = py_lower(s);
  if (!o.empty() && o[0] >= 'a' && o[0] <= 'z') o[0] = char(o[0] - 'a' + 'A');
  return o;
}
std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every code point
    std::vector<uint32_t> c = cps_of(s);
    int64_t n = 0;
    for (size_t i = 0; i <= c.size(); ++i) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      if (i < c.size()) unicode::append_utf8(out, c[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t m = s.find(from, pos);
    if (m == std::string::npos) break;
    out.append(s, pos, m - pos);
    out += to;
    pos = m + from.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

}  // namespace mx::jinja
