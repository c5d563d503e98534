#include "tokenizer/base_tokenizer.h"

#include <algorithm>

namespace mx {

bool Tokenizer::is_eog(int32_t id) const { return std::binary_search(eog_ids.begin(), eog_ids.end(), id); }

}  // namespace mx

namespace mx::tokenizer_impl {

namespace {

bool ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// Token texts llama.cpp treats as end-of-turn / FIM control tokens even when the
// file marks them otherwise (llama_vocab::impl::load).
const std::string_view kEogNames[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",  // <｜end▁of▁sentence｜>
};
const std::string_view kPromotedControlNames[] = {
    // FIM prefix / suffix / middle / pad / repo / file separator
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
    "<reponame>", "<|file_sep|>",
};

}  // namespace

std::vector<int32_t> BaseTokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special) add_prefix(out);
  bool after_special = true;
  for (const Frag& f : partition(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
    } else {
      encode_text(text.substr(f.off, f.len), after_special, out);
      after_special = false;
    }
  }
  if (add_special) add_suffix(out);
  return out;
}

std::string BaseTokenizer::decode(std::span<const int32_t> ids) const {
  std::string s;
  bool first = true;
  for (int32_t id : ids) {
    if (id >= 0 && size_t(id) >= v_.size()) continue;  // the model's padding: no text (token_piece)
    check(id);
    TokenType t = v_.type[size_t(id)];
    if (t == TokenType::Control || t == TokenType::Unknown) continue;
    std::string_view p = pieces_[size_t(id)];
    if (first && strip_first_space_ && !p.empty() && p[0] == ' ') p.remove_prefix(1);
    first = false;
    s += p;
  }
  return s;
}

void BaseTokenizer::finish() {
  vocab_size = v_.size();
  specials_.clear();
  for (size_t i = 0; i < v_.size(); ++i) {
    TokenType t = v_.type[i];
    if ((t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) &&
        !v_.text[i].empty())
      specials_.push_back(int32_t(i));
  }
  std::stable_sort(specials_.begin(), specials_.end(), [&](int32_t a, int32_t b) {
    return v_.text[size_t(a)].size() > v_.text[size_t(b)].size();
  });
  pieces_.assign(v_.size(), std::string());
  for (size_t i = 0; i < v_.size(); ++i) {
    switch (v_.type[i]) {
      case TokenType::Normal: pieces_[i] = make_piece(int32_t(i)); break;
      case TokenType::Control: case TokenType::Unknown: case TokenType::UserDefined:
        pieces_[i] = v_.text[i];
        break;
      case TokenType::Byte:
        if (auto b = parse_byte_token(v_.text[i])) pieces_[i] = std::string(1, char(*b));
        else pieces_[i] = make_piece(int32_t(i));
        break;
      default: break;  // unused / undefined tokens decode to nothing
    }
  }
  eog_ids.clear();
  for (int32_t id : {eos_id, eot_id, eom_id})
    if (id >= 0) eog_ids.push_back(id);
  for (std::string_view n : kEogNames)
    if (int32_t id = v_.find(n); id >= 0) eog_ids.push_back(id);
  std::sort(eog_ids.begin(), eog_ids.end());
  eog_ids.erase(std::unique(eog_ids.begin(), eog_ids.end()), eog_ids.end());
}

void BaseTokenizer::promote_named_controls() {
  auto promote = [&](std::string_view n) {
    if (int32_t id = v_.find(n); id >= 0) v_.type[size_t(id)] = TokenType::Control;
  };
  for (auto n : kEogNames) promote(n);
  for (auto n : kPromotedControlNames) promote(n);
}

std::vector<BaseTokenizer::Frag> BaseTokenizer::partition(std::string_view text, bool parse_special) const {
  std::vector<Frag> frags, next;
  if (text.empty()) return frags;
  frags.push_back({-1, 0, text.size()});
  for (int32_t id : specials_) {
    TokenType t = v_.type[size_t(id)];
    if (!parse_special && (t == TokenType::Control || t == TokenType::Unknown)) continue;
    const std::string& st = v_.text[size_t(id)];
    const uint8_t strip = v_.strip[size_t(id)];
    bool changed = false;
    next.clear();
    for (const Frag& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t off = f.off, len = f.len;
      while (true) {
        size_t m = text.substr(0, off + len).find(st, off);
        if (m == std::string_view::npos) {
          next.push_back({-1, off, len});
          break;
        }
        changed = true;
        size_t left = m - off;
        if (strip & kLstrip)
          while (left > 0 && ascii_space(text[off + left - 1])) --left;
        if (left > 0) next.push_back({-1, off, left});
        next.push_back({id, 0, 0});
        size_t r_off = m + st.size(), r_len = off + len - r_off;
        if (strip & kRstrip)
          while (r_len > 0 && ascii_space(text[r_off])) ++r_off, --r_len;
        if (r_len == 0) break;
        off = r_off;
        len = r_len;
      }
    }
    if (changed) frags.swap(next);
  }
  return frags;
}

}  // namespace mx::tokenizer_impl
