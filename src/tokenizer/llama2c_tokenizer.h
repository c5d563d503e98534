#pragma once
// llama2.c tokenizer files (Karpathy's llama2.c: tokenizer.bin, and the tok{N}.bin
// that its train_vocab.sh writes, e.g. stories260K's tok512.bin), read into the
// SentencePiece-style tokenizer of tokenizer/tokenizer.h.
//
// Format (run.c build_tokenizer): int32 max_token_length, then per token a
// float32 score, an int32 byte length and that many bytes; spaces are plain
// spaces. Ids 0, 1, 2 are <unk>, BOS, EOS (llama2.c writes them "<unk>",
// "\n<s>\n", "\n</s>\n"; here they are the control tokens "<unk>", "<s>", "</s>",
// as SentencePiece names them), "<0xXX>" tokens are byte fallback.
// Encoding is run.c's encode(): BOS, a dummy-prefix space, then merge the
// adjacent pair of highest score until none merges, bytes without a token as
// their <0xXX> token. Decoding drops the leading space of the first piece
// (run.c drops it after BOS).
#include <memory>
#include <optional>
#include <string>

namespace mx {

class Tokenizer;

// True when the file has the layout above exactly (sizes add up to the file's).
bool looks_like_llama2c_tokenizer(const std::string& path);

// Reads one; a truncated or inconsistent file is an mx::Error naming it.
std::unique_ptr<Tokenizer> load_tokenizer_llama2c(const std::string& path);

// The tokenizer file llama2.c would pair with a checkpoint: tok{vocab}.bin or
// tokenizer.bin in the checkpoint's folder (in that order), the first that is a
// llama2.c tokenizer of exactly vocab_size tokens (llama2.c keeps Llama 2's
// 32000-token tokenizer.bin beside its small models).
std::optional<std::string> find_llama2c_tokenizer(const std::string& checkpoint, int vocab_size);

}  // namespace mx
