#include "tokenizer/wordpiece_tokenizer.h"

#include <algorithm>

#include "core/unicode.h"

namespace mx::tokenizer_impl {

namespace {

bool is_chinese_char(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) ||
         (c >= 0x2B920 && c <= 0x2CEAF) ||  // sic: HF's Rust code starts this block at 0x2B920
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

}  // namespace

std::vector<std::string> WpmTokenizer::words(std::string_view text) const {
  std::vector<uint32_t> cps = unicode::decode_utf8(text);
  if (strip_accents)
    for (uint32_t& c : cps) c = unicode::nfd_first(c);
  std::vector<std::string> w(1);
  for (uint32_t c : cps) {
    if (unicode::is_whitespace(c)) {
      if (!w.back().empty()) w.emplace_back();
      continue;
    }
    const uint8_t cat = unicode::category(c);
    if (c == 0 || c == unicode::kReplacement || (cat & unicode::kControl)) continue;
    if (strip_accents && (cat & unicode::kMark)) continue;
    std::string s;
    unicode::append_utf8(s, lowercase ? unicode::to_lower(c) : c);
    if ((cat & unicode::kPunct) || (c < 0x7F && (cat & unicode::kSymbol)) || is_chinese_char(c)) {
      if (!w.back().empty()) w.emplace_back();
      w.back() = s;
      w.emplace_back();
    } else {
      w.back() += s;
    }
  }
  if (w.back().empty()) w.pop_back();
  return w;
}

void WpmTokenizer::encode_text(std::string_view text, bool, std::vector<int32_t>& out) const {
  for (const std::string& word : words(text)) {
    if (word.empty()) continue;
    const std::string w1 = kSpmSpace + word;  // word-initial pieces carry ▁ in GGUF BERT vocabs
    const size_t n = w1.size();
    const size_t start = out.size();
    for (size_t i = 0; i < n; ++i) {
      bool matched = false;
      for (size_t j = std::min(n, i + v_.max_len + 1); j > i; --j) {
        int32_t id = v_.find(std::string_view(w1).substr(i, j - i));
        if (id >= 0) {
          out.push_back(id);
          matched = true;
          i = j - 1;
          break;
        }
      }
      if (!matched) {
        out.resize(start);
        break;
      }
    }
    if (out.size() == start && unk_id >= 0) out.push_back(unk_id);
  }
}

}  // namespace mx::tokenizer_impl
