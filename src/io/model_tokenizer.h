#pragma once
// Which tokenizer goes with a model, found the way its own format says, so every
// subcommand (generate, serve, bench, eval) pairs them alike:
//   --tokenizer FILE given: that file, by content: a tokenizer.json, a GGUF's
//     tokenizer.ggml.* metadata, or a llama2.c tokenizer file;
//   a model directory: its tokenizer.json, if any;
//   a .gguf: its own tokenizer metadata, if any;
//   a llama2.c checkpoint: tokenizer.bin or tok{vocab}.bin beside it
//     (io/llama2c_tokenizer.h), if any.
// No tokenizer found is not an error (token-id prompts only): `found` is null.
#include <memory>
#include <string>

#include "io/tokenizer.h"

namespace mx {

struct ModelTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;  // null: none found
  std::string path;                      // the file it came from
};

ModelTokenizer load_model_tokenizer(const std::string& model_path, const std::string& tokenizer_flag);

}  // namespace mx
