// libFuzzer target: a quantizer exclude pattern (--exclude, or an entry of
// quantization_config's exclude list) and a layer name, "PATTERN\nNAME": the
// pattern is turned into its config entry and matched as the loader and the
// quantizer match every Linear's name.
#include "fuzz_common.h"
#include "quant/quant_config.h"

MXFUZZ_TARGET(quant_exclude) {
  const std::string in = mxfuzz::as_string(data, size);
  const size_t nl = in.find('\n');
  const std::string pattern = in.substr(0, nl);
  const std::string name = nl == std::string::npos ? "model.layers.0.mlp.gate" : in.substr(nl + 1);
  mxfuzz::refusal_ok([&] {
    const std::string entry = mx::exclude_entry(pattern);
    (void)mx::exclude_matches(entry, name);
  });
  return 0;
}
