#pragma once
// Tokenizers: text <-> token ids, matching llama.cpp's tokenizer for the same
// vocabulary (tests/tokenizer/test_tokenizer.cpp checks llama.cpp's own test vectors).
//
//   GGUF tokenizer.ggml.model = "gpt2":  byte-level BPE over merges, split first by
//       the pre-tokenizer tokenizer.ggml.pre names (tokenizer/pretokenize.h);
//   "llama": SentencePiece-style BPE by token scores with <0xXX> byte fallback;
//   "bert":  WordPiece (greedy longest match, BERT normalisation).
//   HF tokenizer.json with a byte-level "BPE" model: the same BPE core.
//
// Before the model runs, special tokens are cut out of the text, longest first,
// as llama.cpp does: user-defined tokens always, control tokens only when
// parse_special is set (so a chat template's "<|im_start|>" becomes one token,
// while the same string in user text stays text unless the caller asks).
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mx {

class GgufFile;

// Token types as GGUF stores them (tokenizer.ggml.token_type; llama.cpp numbering).
enum class TokenType : uint8_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Text to ids. add_special: add BOS / EOS (BERT: CLS ... SEP) as the vocabulary
  // asks (add_bos / add_eos). parse_special: control tokens spelled in the text
  // become those tokens.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special,
                                      bool parse_special = false) const = 0;
  // Ids to text: each token's bytes, concatenated. Control tokens decode to
  // nothing; for SentencePiece vocabularies the space the encoder put in front
  // of the text is dropped again, so decode(encode(s)) == s for byte-level BPE
  // and SentencePiece (no clean-up of spaces before punctuation is done). Ids
  // past the tokenizer (a model's padded vocabulary) decode to nothing; a
  // negative id is an mx::Error.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // The bytes one token stands for (may be part of a UTF-8 character). Control
  // and unknown tokens give "" unless `special`, then their text; so do ids past
  // the tokenizer.
  virtual std::string token_piece(int32_t id, bool special = false) const = 0;
  // The vocabulary entry as stored ("Ġthe", "▁the", "<0x0A>", "<|endoftext|>").
  virtual std::string token_text(int32_t id) const = 0;
  virtual TokenType token_type(int32_t id) const = 0;
  // Its score: the merge priority of SentencePiece-style vocabularies (0 elsewhere).
  virtual float token_score(int32_t id) const = 0;
  // Id of the vocabulary entry spelled exactly `text`, if any.
  virtual std::optional<int32_t> find_token(std::string_view text) const = 0;

  bool is_eog(int32_t id) const;  // ends generation: eos, eot, eom, <|im_end|>-like tokens

  std::string model;       // "gpt2" (byte-level BPE), "llama" (SentencePiece), "bert" (WordPiece)
  std::string pre;         // pre-tokenizer: GGUF tokenizer.ggml.pre, or "hf:<name>" from tokenizer.json
  size_t vocab_size = 0;
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, sep_id = -1, pad_id = -1, eot_id = -1, eom_id = -1;
  bool add_bos = false, add_eos = false;
  bool add_space_prefix = false;  // SentencePiece: a space goes in front of the text
  std::vector<int32_t> eog_ids;  // sorted
};

// From a GGUF's tokenizer.ggml.* metadata. Unsupported models or pre-tokenizers,
// missing or inconsistent arrays are an mx::Error naming the key.
std::unique_ptr<Tokenizer> load_tokenizer_gguf(const GgufFile& gguf);

// From a Hugging Face tokenizer.json with a byte-level BPE model (GPT-2,
// Llama-3, Qwen2 and the other pre-tokenizer regexes tokenizer/pretokenize.h knows).
// bos/eos/add_bos come from the TemplateProcessing post-processor and, when it
// sits beside tokenizer.json, tokenizer_config.json. Anything unsupported (model
// type, normalizer, pre-tokenizer pattern, decoder) is an mx::Error naming it.
std::unique_ptr<Tokenizer> load_tokenizer_hf(const std::string& tokenizer_json_path);
// The same from parsed JSON: tokenizer.json's content and tokenizer_config.json's
// (null when there is none); `where` names the source in errors.
std::unique_ptr<Tokenizer> parse_tokenizer_hf(const nlohmann::json& tokenizer_json,
                                              const nlohmann::json& tokenizer_config, const std::string& where);

// A SentencePiece-style tokenizer (the GGUF "llama" model) from a plain
// vocabulary, for formats that carry one outside GGUF (llama2.c's tokenizer
// files: tokenizer/llama2c_tokenizer.h). Spaces inside `text` are spelled "▁" (U+2581),
// byte-fallback tokens "<0xXX>". Encoding merges the adjacent pair of highest
// score first (the leftmost on ties), with byte fallback for what no token
// spells; `add_space_prefix` puts a space in front of the text (SentencePiece's
// dummy prefix).
struct SpmVocab {
  std::vector<std::string> text;
  std::vector<float> score;
  std::vector<TokenType> type;
  int32_t bos_id = -1, eos_id = -1, unk_id = -1;
  bool add_bos = true, add_space_prefix = true;
  std::string pre;  // names the source, as Tokenizer::pre does
};
std::unique_ptr<Tokenizer> make_spm_tokenizer(SpmVocab vocab, const std::string& where);

// GPT-2's byte-to-unicode map used by byte-level BPE vocabularies: byte b is
// spelled by this UTF-8 string ("Ġ" for ' ').
const std::string& byte_level_char(uint8_t b);

}  // namespace mx
