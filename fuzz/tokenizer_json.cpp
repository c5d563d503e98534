// libFuzzer target: a tokenizer.json as load_tokenizer_hf parses it; a tokenizer
// it accepts then encodes and decodes a fixed text with special tokens.
#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "tokenizer/tokenizer.h"

MXFUZZ_TARGET(tokenizer_json) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  mxfuzz::refusal_ok([&] {
    auto tok = mx::parse_tokenizer_hf(j, nlohmann::json(), "fuzz/tokenizer.json");
    const auto ids = tok->encode("Hello, world! caf\xC3\xA9 123 <|endoftext|>\n\n  x", true, true);
    (void)tok->decode(ids);
  });
  return 0;
}
