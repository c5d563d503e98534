#pragma once
// A small byte-level BPE trainer (GPT-2 style), for synthetic tokenizers: the
// text is split by a real pre-tokenizer (tokenizer/pretokenize.h), then the most
// frequent adjacent pair of symbols is merged, again and again. Deterministic
// on every platform: ties go to the pair of lower token ids. Fast enough for a
// few thousand merges over a few tens of KB (milliseconds).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/pretokenize.h"

namespace mx {

struct BpeTrainOptions {
  std::vector<PreSplit> pre;  // pre-tokenizer steps (empty: the whole text is one word)
  bool nfc = false;           // normalize the text to NFC first (Qwen2's normalizer)
  size_t max_tokens = 0;      // stop when the vocabulary has this many tokens (0: no limit)
  size_t max_merges = 50000;  // and after this many merges
  int64_t min_count = 1;      // pairs seen fewer times than this are never merged
};

struct BpeVocab {
  // Token texts in byte-level spelling ("Ġthe"), by id: the 256 single bytes in
  // GPT-2's bytes_to_unicode order ('!' is id 0), then one per new merge result.
  std::vector<std::string> tokens;
  // Merges in rank order, byte-level spelled. A merge whose result was already a
  // token adds no token, so merges.size() >= tokens.size() - 256.
  std::vector<std::pair<std::string, std::string>> merges;
};

BpeVocab train_bpe(std::string_view text, const BpeTrainOptions& opts);

// A few KB of original English prose (devtools/bpe_corpus.cpp) to train on.
std::string_view bpe_builtin_corpus();

}  // namespace mx
