// libFuzzer target: a GGUF file (header, metadata, tensor infos) as GgufFile
// parses a mapped file, then every accessor a loader uses on what it accepted.
#include "core/mapped_file.h"
#include "fuzz_common.h"
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

MXFUZZ_TARGET(gguf) {
  mxfuzz::refusal_ok([&] {
    mx::GgufFile g(mx::MappedFile::from_bytes("fuzz.gguf", mxfuzz::as_string(data, size)));
    for (const auto& [key, value] : g.metadata()) (void)value.to_string();
    for (const auto& t : g.tensors()) (void)g.tensor(t.name);
    // The tokenizer loader is the main consumer of GGUF metadata.
    if (g.has("tokenizer.ggml.model")) (void)mx::load_tokenizer_gguf(g);
  });
  return 0;
}
