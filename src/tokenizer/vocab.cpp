#include "tokenizer/vocab.h"

#include <fmt/format.h>

#include "core/unicode.h"

namespace mx::tokenizer_impl {

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t m; (m = s.find(from, pos)) != std::string::npos; pos = m + from.size()) {
    out.append(s, pos, m - pos);
    out.append(to);
  }
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

std::string unmark_spaces(std::string text) {
  replace_all(text, kSpmSpace, " ");
  return text;
}

ByteLevelTable::ByteLevelTable() {
  uint32_t n = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    uint32_t cp = printable ? b : 256 + n++;
    unicode::append_utf8(enc[b], cp);
    dec[cp] = uint8_t(b);
  }
}

const ByteLevelTable& byte_table() {
  static const ByteLevelTable t;
  return t;
}

std::string byte_level_decode(const std::string& text) {
  const auto& t = byte_table();
  std::string out;
  for (uint32_t cp : unicode::decode_utf8(text)) {
    auto it = t.dec.find(cp);
    if (it != t.dec.end()) {
      out.push_back(char(it->second));
    } else {
      std::string u;
      unicode::append_utf8(u, cp);
      out += "[UNK_BYTE_0x";
      for (char c : u) out += fmt::format("{:02x}", uint8_t(c));
      out += text + "]";
    }
  }
  return out;
}

std::optional<uint8_t> parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int h = hex(t[3]), l = hex(t[4]);
  if (h < 0 || l < 0) return std::nullopt;
  return uint8_t(h * 16 + l);
}

}  // namespace mx::tokenizer_impl

namespace mx {

const std::string& byte_level_char(uint8_t b) { return tokenizer_impl::byte_table().enc[b]; }

}  // namespace mx
