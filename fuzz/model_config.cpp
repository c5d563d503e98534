// libFuzzer target: a config.json as load_hf_config parses it (JSON, then every
// architecture's fields, quantization_config and the consistency checks).
#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "formats/model_config.h"

MXFUZZ_TARGET(model_config) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;  // load_hf_config refuses invalid JSON before parsing fields
  mxfuzz::refusal_ok([&] {
    const mx::ModelConfig c = mx::parse_hf_config(j);
    (void)mx::rope_inv_freq(c, c.rotary_dim());
    (void)mx::attention_scale(c);
  });
  return 0;
}
