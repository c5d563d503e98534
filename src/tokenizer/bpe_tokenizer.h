#pragma once
// Byte-level BPE (GGUF "gpt2", HF tokenizer.json "BPE"): the text is split by
// the pre-tokenizer (tokenizer/pretokenize.h), each piece spelled in GPT-2's
// byte-level alphabet and merged by merge rank, lowest first, as llama.cpp's
// llm_tokenizer_bpe does. Internal to the tokenizers.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/base_tokenizer.h"
#include "tokenizer/pretokenize.h"

namespace mx::tokenizer_impl {

class BpeTokenizer final : public BaseTokenizer {
 public:
  struct Options {
    std::vector<PreSplit> steps;
    bool ignore_merges = false;  // a word that is a vocabulary token is taken whole (Llama-3)
    bool nfc = false;            // HF normalizer NFC (Qwen2)
    bool prefix_space = false;   // HF ByteLevel add_prefix_space
  };

  // v_ must be filled. merges in rank order.
  void build(Options opt, const std::vector<std::pair<std::string, std::string>>& merges);

 protected:
  std::string make_piece(int32_t id) const override { return byte_level_decode(v_.text[size_t(id)]); }
  void encode_text(std::string_view text, bool, std::vector<int32_t>& out) const override;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // symbol id of the merged string
  };
  struct Sym;     // a run of a word's bytes (bpe_tokenizer.cpp)
  struct Bigram;  // two adjacent symbols a merge joins

  Options opt_;
  StrMap sym_index_;               // every token and merge string -> symbol id
  std::vector<int32_t> sym_token_; // symbol id -> token id or -1
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_sym_{};

  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

  int32_t intern(const std::string& s);
  void emit(const Sym& s, std::string_view word, std::vector<int32_t>& out) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
};

}  // namespace mx::tokenizer_impl
