#pragma once
// WordPiece (GGUF "bert"): BERT normalisation and word splitting, then each
// word greedily by the longest vocabulary match, [UNK] when a word cannot be
// spelled; [CLS] ... [SEP] around the text. Internal to the tokenizers.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/base_tokenizer.h"

namespace mx::tokenizer_impl {

class WpmTokenizer final : public BaseTokenizer {
 public:
  bool lowercase = true, strip_accents = true;
  WpmTokenizer() { strip_first_space_ = true; }  // words carry a leading ▁

 protected:
  std::string make_piece(int32_t id) const override { return unmark_spaces(v_.text[size_t(id)]); }

  void add_prefix(std::vector<int32_t>& out) const override {
    if (bos_id >= 0) out.push_back(bos_id);  // [CLS]
  }
  void add_suffix(std::vector<int32_t>& out) const override {
    if (sep_id >= 0) out.push_back(sep_id);  // [SEP]
  }

  // BERT normalisation and splitting: whitespace separates words, punctuation
  // (and ASCII symbols, CJK ideographs) are words of their own.
  std::vector<std::string> words(std::string_view text) const;
  void encode_text(std::string_view text, bool, std::vector<int32_t>& out) const override;
};

}  // namespace mx::tokenizer_impl
