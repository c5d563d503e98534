#pragma once
// SentencePiece-style BPE by token scores (GGUF "llama", llama2.c vocabularies):
// spaces are spelled "▁", the adjacent pair whose merge is the highest-scored
// token merges first (the leftmost on ties), and what no token spells falls
// back to <0xXX> byte tokens, as llama.cpp's llm_tokenizer_spm does. Internal
// to the tokenizers.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/base_tokenizer.h"

namespace mx::tokenizer_impl {

class SpmTokenizer final : public BaseTokenizer {
 public:
  SpmTokenizer() { add_space_prefix = true; }

  // Call once v_ and add_space_prefix are final.
  void build();

 protected:
  std::string make_piece(int32_t id) const override { return unmark_spaces(v_.text[size_t(id)]); }
  void encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const override;

 private:
  std::array<int32_t, 256> byte_tok_{};
};

}  // namespace mx::tokenizer_impl
