#pragma once
// Which tokenizer goes with a model, found the way its own format says, so the
// subcommands that take text (generate, serve, convert) pair them alike:
//   --tokenizer FILE given: that file: a GGUF (by magic) with tokenizer.ggml.*
//     metadata, a llama2.c tokenizer file (by its layout), else a tokenizer.json
//     (by its .json name);
//   a model directory: its tokenizer.json, if any;
//   a .gguf: its own tokenizer metadata, if any;
//   a llama2.c checkpoint: tok{vocab}.bin or tokenizer.bin beside it, of the
//     checkpoint's vocabulary size (tokenizer/llama2c_tokenizer.h), if any.
// No tokenizer found is not an error (token-id prompts only): `tokenizer` is null.
#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace mx {

struct ModelTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;  // null: none found
  std::string path;                      // the file it came from
  bool llama2c = false;                  // a llama2.c tokenizer file: one that stores no token count

  // An mx::Error when the tokenizer has more ids than the model (fewer is padding), or, read
  // from a llama2.c tokenizer file (which stores no count), not exactly as many.
  void check_fits(int model_vocab_size) const;
};

ModelTokenizer load_model_tokenizer(const std::string& model_path, const std::string& tokenizer_flag);

}  // namespace mx
