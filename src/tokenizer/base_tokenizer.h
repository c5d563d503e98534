#pragma once
// The parts every tokenizer model shares: special tokens cut out of the text
// before the model runs (longest first, as llama.cpp does), each token's bytes,
// decode, the end-of-generation ids. A model (BPE, SentencePiece, WordPiece)
// adds how a piece of plain text becomes ids and how a Normal token is spelled.
// Internal to the tokenizers.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace mx::tokenizer_impl {

class BaseTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const override;

  std::string decode(std::span<const int32_t> ids) const override;

  // An id past the tokenizer, in a model's padded vocabulary (one the model can sample: its
  // embedding has more rows than the tokenizer has tokens), has no text: "" (a server answered 500).
  std::string token_piece(int32_t id, bool special) const override {
    if (id >= 0 && size_t(id) >= v_.size()) return "";
    check(id);
    TokenType t = v_.type[size_t(id)];
    if (!special && (t == TokenType::Control || t == TokenType::Unknown)) return "";
    return pieces_[size_t(id)];
  }

  std::string token_text(int32_t id) const override {
    check(id);
    return v_.text[size_t(id)];
  }

  TokenType token_type(int32_t id) const override {
    check(id);
    return v_.type[size_t(id)];
  }

  float token_score(int32_t id) const override {
    check(id);
    return v_.score[size_t(id)];
  }

  std::optional<int32_t> find_token(std::string_view text) const override {
    int32_t id = v_.find(text);
    if (id < 0) return std::nullopt;
    return id;
  }

  Vocab v_;

  // Call once the vocabulary, types and ids are final.
  void finish();

  // llama.cpp promotes end-of-turn and FIM tokens to control tokens by name.
  void promote_named_controls();

  // ids from metadata out of range are ignored (llama.cpp keeps its default).
  int32_t valid_or(int64_t id, int32_t def) const {
    return (id >= 0 && uint64_t(id) < v_.size()) ? int32_t(id) : def;
  }

 protected:
  bool strip_first_space_ = false;   // SentencePiece: drop the prefixed space when decoding
  std::vector<std::string> pieces_;  // the bytes each token stands for
  std::vector<int32_t> specials_;    // control/user-defined/unknown tokens, longest first

  virtual std::string make_piece(int32_t id) const = 0;  // bytes of a Normal token
  virtual void encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const = 0;
  virtual void add_prefix(std::vector<int32_t>& out) const {
    if (add_bos && bos_id >= 0) out.push_back(bos_id);
  }
  virtual void add_suffix(std::vector<int32_t>& out) const {
    if (add_eos && eos_id >= 0) out.push_back(eos_id);
  }

  void check(int32_t id) const {
    if (id < 0 || size_t(id) >= v_.size()) fail("token id {} is out of range (vocabulary of {} tokens)", id, v_.size());
  }

 private:
  struct Frag {
    int32_t token;  // >= 0: a special token; -1: text [off, off + len)
    size_t off, len;
  };

  // Cuts special tokens out of the text, longest token first, each one at every
  // occurrence in the text that is left (llama.cpp tokenizer_st_partition).
  std::vector<Frag> partition(std::string_view text, bool parse_special) const;
};

}  // namespace mx::tokenizer_impl
