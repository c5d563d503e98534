#pragma once
// Which Linear layers of a checkpoint are quantized, and how: the
// quantization_config of config.json. Formats read and written:
//   AMD Quark OCP-MX (quant_method "quark", fp4 weights, per_group 32, e8m0
//   scales): <layer>.weight U8 [out, in/2] + <layer>.weight_scale U8 [out, in/32]
//   (docs/architectures.md 5.2; vLLM quark.py resolution rules).
//   Block FP8 (quant_method "fp8", weight_block_size [128, 128]): <layer>.weight
//   F8_E4M3 [out, in] + <layer>.weight_scale_inv F32 [ceil(out/128), ceil(in/128)]
//   (docs/architectures.md 5.4).
// A layer is quantized unless an exclude entry matches its name (the Linear's
// prefix, e.g. "model.layers.3.mlp.gate"): "re:PATTERN" matches as Python's
// re.match (anchored at the start only), anything else must be equal.
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace mx {

enum class QuantMethod { None, Mxfp4, Fp8Block };

struct QuantConfig {
  QuantMethod method = QuantMethod::None;
  std::vector<std::string> exclude;

  bool quantized(const std::string& layer) const;  // false for QuantMethod::None
  const char* method_name() const;
};

// The exclude entries (Quark form) the quantizer uses by default for a config:
// lm_head, every router gate, and every MTP layer (model.layers.{L+i}.*).
std::vector<std::string> default_excludes(int num_hidden_layers, int num_mtp_layers);

// Parses config.json's "quantization_config" (absent or null: QuantMethod::None).
// Unsupported schemes are errors naming the field.
QuantConfig parse_quant_config(const nlohmann::json& config);

// The quantization_config object that `mxserve quantize` writes (Quark's
// complete field set for MXFP4, the DeepSeek-style one for FP8).
nlohmann::json quant_config_json(const QuantConfig& q);

// A user exclude pattern (exact name, glob with * ? [..], or "re:REGEX") as the
// Quark-style entry written into config.json: globs become anchored "re:" regexes.
std::string exclude_entry(const std::string& pattern);

// Python re.match semantics on a name: true if entry matches it.
bool exclude_matches(const std::string& entry, const std::string& name);

}  // namespace mx
