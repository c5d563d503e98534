// libFuzzer target: a response_format JSON Schema, then a text, "SCHEMA\nTEXT": the
// schema is compiled as the server compiles it (grammar/json_schema.h) and the
// text fed to its matcher byte by byte, with the token mask of each state over
// a small vocabulary (grammar/token_mask.h).
#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"

MXFUZZ_TARGET(json_schema) {
  const std::string in = mxfuzz::as_string(data, size);
  const size_t nl = in.find('\n');
  const nlohmann::ordered_json schema =
      nlohmann::ordered_json::parse(in.substr(0, nl), nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return 0;
  const std::string text = nl == std::string::npos ? "" : in.substr(nl + 1, 256);
  mxfuzz::refusal_ok([&] {
    static const auto vocab = std::make_shared<const mx::grammar::VocabTrie>(std::vector<std::string>{
        "{", "}", "[", "]", "\"", ":", ",", " ", "\n", "a", "1", "0", "-", ".", "e", "true", "false", "null",
        "\":", "\",\"", "{\"", "\\u00e9", "\xC3\xA9", "2024-01-01", "T", "Z"});
    mx::grammar::GrammarMasks masks(mx::grammar::json_schema_grammar(schema), vocab, 8);
    mx::grammar::Matcher m(masks.grammar());
    for (char c : text) {
      (void)masks.admitted(m);
      m = m.accept(uint8_t(c));
      if (m.dead()) break;
    }
    (void)m.complete();
  });
  return 0;
}
