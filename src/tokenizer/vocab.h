#pragma once
// What every tokenizer model shares: the vocabulary (texts, scores, types and
// the text -> id index), GPT-2's byte-level spelling of bytes, SentencePiece's
// space mark and <0xXX> byte tokens. Internal to the tokenizers
// (tokenizer/tokenizer.h is the API).
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace mx::tokenizer_impl {

struct SvHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using StrMap = std::unordered_map<std::string, int32_t, SvHash, std::equal_to<>>;

const char* const kSpmSpace = "\xe2\x96\x81";  // U+2581 ▁

// Replaces every occurrence of `from` in `s` by `to`.
void replace_all(std::string& s, std::string_view from, std::string_view to);
// A token text that spells spaces "▁" (SentencePiece, GGUF BERT vocabularies) with its spaces back.
std::string unmark_spaces(std::string text);

// GPT-2's bytes_to_unicode: printable Latin-1 bytes spell themselves, the rest
// map to U+0100.. in byte order.
struct ByteLevelTable {
  std::array<std::string, 256> enc;
  std::unordered_map<uint32_t, uint8_t> dec;
  ByteLevelTable();
};
const ByteLevelTable& byte_table();  // built once

// A vocabulary token's bytes under the byte-level mapping (llama.cpp llama_decode_text).
std::string byte_level_decode(const std::string& text);

// "<0xAB>" -> 0xAB.
std::optional<uint8_t> parse_byte_token(std::string_view t);

// Whitespace an added token strips on its left / right when it is cut out of
// the text (HF added_tokens lstrip / rstrip).
enum : uint8_t { kLstrip = 1, kRstrip = 2 };

struct Vocab {
  std::vector<std::string> text;
  std::vector<float> score;
  std::vector<TokenType> type;
  std::vector<uint8_t> strip;
  StrMap to_id;
  size_t max_len = 0;

  size_t size() const { return text.size(); }
  int32_t find(std::string_view s) const {
    auto it = to_id.find(s);
    return it == to_id.end() ? -1 : it->second;
  }
  void resize(size_t n) {
    text.resize(n);
    score.assign(n, 0.0f);
    type.assign(n, TokenType::Normal);
    strip.assign(n, 0);
  }
  // Indexes text[i]; a later duplicate wins, as in llama.cpp.
  void index(int32_t i) {
    to_id[text[size_t(i)]] = i;
    max_len = std::max(max_len, text[size_t(i)].size());
  }
};

}  // namespace mx::tokenizer_impl
