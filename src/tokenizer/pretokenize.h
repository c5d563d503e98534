#pragma once
// Pre-tokenizers: the regex splits BPE tokenizers apply before merging, written
// by hand (std::regex has no \p{L}). A pre-tokenizer is a sequence of steps;
// each step splits every piece the previous steps produced, and both what its
// regex matches and the text between matches become pieces (llama.cpp's
// unicode_regex_split, HF's Split with behavior "Isolated"). Each step states
// the regex it implements exactly.
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace mx {

enum class PreSplit : uint8_t {
  Gpt2,              // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  Llama3,            // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  Qwen2,             // as Llama3 with \p{N} instead of \p{N}{1,3}
  DigitEach,         // \p{N}
  DigitRun,          // \p{N}+
  Digits1to3,        // \p{N}{1,3}
  Ascii3Digits,      // [0-9][0-9][0-9]
  NewlineEach,       // [\r\n]
  SpaceLetters,      // \s?\p{L}+
  SpacePunct,        // \s?\p{P}+
  CjkDeepseekCoder,  // [一-龥ࠀ-一가-퟿]+   (U+4E00-9FA5, U+0800-4E00, U+AC00-D7FF)
  PunctRun,          // [\p{P}\$\+<=>\^~\|]+
  PunctRunFalcon,    // [\p{P}\$\+<=>\^~\|`]+
  CjkDeepseek3,      // [一-龥぀-ゟ゠-ヿ]+   (U+4E00-9FA5, U+3040-309F, U+30A0-30FF)
  // [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  Deepseek3,
  // The same as llama.cpp evaluates it: its \p{S} leaves out '~' for ASCII text.
  Deepseek3LlamaCpp,
};

const char* pre_split_regex(PreSplit s);

// A half-open range of code point indices.
struct Piece {
  uint32_t begin, end;
};

// Splits cps[0, n) by the steps in order. An empty step list gives one piece.
std::vector<Piece> pretokenize(std::span<const uint32_t> cps, std::span<const PreSplit> steps);

// The steps llama.cpp applies for a GGUF tokenizer.ggml.pre value (gpt2-type
// vocabs), or nullopt for one we do not implement. ignore_merges and add_bos
// report the family defaults llama.cpp attaches to the name.
struct GgufPreInfo {
  std::vector<PreSplit> steps;
  bool ignore_merges = false;
  bool add_bos = false;
};
std::optional<GgufPreInfo> gguf_pre_tokenizer(std::string_view pre);

// The step implementing an HF tokenizer.json Split regex, or nullopt.
std::optional<PreSplit> pre_split_for_regex(std::string_view pattern);

}  // namespace mx
