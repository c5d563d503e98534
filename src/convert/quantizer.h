#pragma once
// mxserve quantize: rewrites a checkpoint with its Linear weights in MXFP4
// (AMD Quark's export layout) or block FP8, everything else unchanged, and a
// quantization_config that says exactly which layers are quantized.
#include <string>
#include <vector>

#include "quant/mxfp4.h"
#include "quant/quant_config.h"

namespace mx {

struct QuantizeOptions {
  QuantMethod method = QuantMethod::Mxfp4;
  std::vector<std::string> exclude;  // user patterns: exact, glob or re:REGEX
  bool default_excludes = true;      // router gates, lm_head, every MTP layer
  bool strict = false;               // a pattern that matches nothing is an error
  mxfp4::ScaleRule scale_rule = mxfp4::ScaleRule::Spec;
  size_t max_shard_bytes = size_t(2) << 30;
  bool force = false;  // replace an existing output directory (never the input)
};

struct QuantizeReport {
  int quantized = 0, kept = 0;  // Linear layers
  size_t bytes_in = 0, bytes_out = 0;
  std::vector<std::string> excluded;  // Linear layers left unquantized
  std::vector<std::string> warnings;
};


// Writes out_dir atomically (core/atomic_output.h): complete, or the previous
// output untouched. An existing out_dir needs opts.force; the input never.
QuantizeReport quantize_checkpoint(const std::string& in, const std::string& out_dir,
                                   const QuantizeOptions& opts);

}  // namespace mx
