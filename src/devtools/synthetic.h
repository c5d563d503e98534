#pragma once
// Synthetic checkpoints for tests and benchmarks: config.json + (sharded)
// safetensors with exactly the tensor names a real HF checkpoint of the family
// has, random weights with realistic scales. No network, no real weights needed.
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace mx {

struct SyntheticSpec {
  std::string arch = "llama";  // llama | qwen2 | qwen3 | glm4_moe | deepseek_v3 | qwen3_moe
  std::string preset = "tiny";    // tiny | small | medium
  DType dtype = DType::BF16;      // F32 or BF16
  uint64_t seed = 0;
  size_t max_shard_bytes = size_t(2) << 30;  // HF's default shard size is a few GB
};

// Writes DIR/config.json, the safetensors files and the tokenizer files
// (write_synthetic_tokenizer). Returns the parameter count.
int64_t write_synthetic_model(const std::string& dir, const SyntheticSpec& spec);

// What write_synthetic_tokenizer wrote: the ids config.json names.
struct SyntheticTokenizerInfo {
  int32_t bos_id = -1;           // bos_token_id
  std::vector<int32_t> eos_ids;  // eos_token_id: the family's end-of-generation tokens
  int32_t pad_id = -1;           // pad_token_id, -1 if the family has none
  size_t learned_merges = 0;     // BPE merges learned from the built-in corpus
  size_t reserved = 0;           // filler tokens (" tok0", " tok1", ...) padding the vocabulary
};

// Writes DIR/tokenizer.json (byte-level BPE with exactly vocab_size tokens: 256
// byte tokens, merges learned from devtools/bpe_corpus.cpp with the family's
// pre-tokenizer, then -- only when the corpus has too few merges -- filler
// tokens up to vocab_size less the specials: ordinary tokens " tok0", " tok1",
// ... that no merge produces but that decode to distinct visible text, so a
// random-weight model's output reads and streams like text; then the family's
// special tokens at the top),
// tokenizer_config.json (the family's real chat template, bos/eos/pad tokens)
// and generation_config.json, for arch's family: llama -> Llama-3.1/3.3,
// qwen2 -> Qwen2.5, qwen3 / qwen3_moe -> Qwen3, glm4_moe -> GLM-4.5,
// deepseek_v3 -> DeepSeek-V3.1.
SyntheticTokenizerInfo write_synthetic_tokenizer(const std::string& dir, const std::string& arch, int vocab_size,
                                                 int max_length);

}  // namespace mx
