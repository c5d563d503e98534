#include "tokenizer/model_tokenizer.h"

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "formats/llama2c.h"
#include "tokenizer/llama2c_tokenizer.h"

namespace mx {

namespace fs = std::filesystem;

namespace {

// llama2c: set when p is a llama2.c tokenizer file.
std::unique_ptr<Tokenizer> load_tokenizer_file(const std::string& p, bool& llama2c) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) fail("--tokenizer {}: not a file", p);
  if (is_gguf_file(p)) {
    GgufFile g(p);
    if (!g.has("tokenizer.ggml.model")) fail("--tokenizer {}: the GGUF has no tokenizer.ggml.* metadata", p);
    return load_tokenizer_gguf(g);
  }
  if ((llama2c = looks_like_llama2c_tokenizer(p))) return load_tokenizer_llama2c(p);
  if (fs::path(p).extension() == ".json") return load_tokenizer_hf(p);
  if (fs::path(p).extension() == ".bin") return load_tokenizer_llama2c(p);  // fails saying why it is not one
  fail("--tokenizer {}: neither a tokenizer.json, a GGUF nor a llama2.c tokenizer file", p);
}

}  // namespace

ModelTokenizer load_model_tokenizer(const std::string& model, const std::string& flag) {
  ModelTokenizer r;
  std::error_code ec;
  if (!flag.empty()) {
    r.path = flag;
  } else if (fs::is_directory(model, ec)) {
    if (fs::is_regular_file(fs::path(model) / "tokenizer.json", ec)) r.path = (fs::path(model) / "tokenizer.json").string();
  } else if (is_gguf_file(model)) {
    GgufFile g(model);
    if (g.has("tokenizer.ggml.model")) {
      r.tokenizer = load_tokenizer_gguf(g);  // a GGUF carries its own tokenizer
      r.path = model;
    }
    return r;
  } else if (fs::is_regular_file(model, ec) && looks_like_llama2c(model)) {
    if (auto p = find_llama2c_tokenizer(model, llama2c_vocab_size(model))) {
      r.tokenizer = load_tokenizer_llama2c(*p);
      r.path = *p;
      r.llama2c = true;
    }
    return r;
  }
  if (!r.path.empty()) r.tokenizer = load_tokenizer_file(r.path, r.llama2c);
  return r;
}

void ModelTokenizer::check_fits(int model_vocab_size) const {
  if (!tokenizer) return;
  MX_CHECK(tokenizer->vocab_size <= size_t(model_vocab_size),
           "the tokenizer {} ({} tokens) does not fit the model's vocabulary of {}", path, tokenizer->vocab_size,
           model_vocab_size);
  // A llama2.c tokenizer file stores no token count: cut after a whole token it still parses,
  // and only the count tells (300 of 512 tokens loaded and garbled every prompt).
  if (llama2c)
    MX_CHECK(tokenizer->vocab_size == size_t(model_vocab_size),
             "the llama2.c tokenizer {} holds {} tokens, the model's vocabulary {} (a truncated file?)", path,
             tokenizer->vocab_size, model_vocab_size);
  if (tokenizer->vocab_size < size_t(model_vocab_size))
    std::fprintf(stderr, "note: the tokenizer %s has %zu tokens, the model's vocabulary %d: ids %zu..%d (padding) "
                 "have no text if sampled\n", path.c_str(), tokenizer->vocab_size, model_vocab_size,
                 tokenizer->vocab_size, model_vocab_size - 1);
}

}  // namespace mx
