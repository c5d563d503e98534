#pragma once
// How a command loads its model (models/model.h LoadOptions), shared by
// generate, serve, bench --in-process / --launch-server and mtp-data:
// --load-format, --dummy-dtype, --dummy-seed and --mtp-head. (--backend is
// parallel_args.h's, or the command's own where it has no --tp / --ep.)
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "models/model.h"

namespace mx::cli {

inline void add_load_options(CLI::App* s, LoadOptions& lo) {
  s->add_option("--load-format", lo.load_format,
                "auto: the checkpoint at --model; dummy: --model's config.json alone (a directory holding it, or "
                "the file) with random weights made in the backend's memory, to serve and benchmark a model's "
                "shape without its weights")
      ->check(CLI::IsMember({"auto", "dummy"}))
      ->capture_default_str();
  s->add_option("--dummy-dtype", lo.dummy_dtype,
                "With --load-format dummy: the Linear layers' format: bf16, f32, fp8 (128x128 block FP8) or mxfp4 "
                "(router gates, lm_head and MTP layers stay bf16, as `mxserve quantize` leaves them); default: the "
                "config's quantization_config, else bf16")
      ->check(CLI::IsMember({"bf16", "f32", "fp8", "mxfp4"}));
  s->add_option("--dummy-seed", lo.dummy_seed, "With --load-format dummy: the weights' random seed")
      ->capture_default_str();
  s->add_option("--hf-overrides", lo.hf_overrides,
                "With --load-format dummy: a JSON object whose keys replace config.json's, e.g. "
                "'{\"num_hidden_layers\": 8}' for a shorter stack of the same layers");
  s->add_flag("--gpu-graphs", lo.gpu_graphs,
              "Replay decode steps as CUDA / HIP graphs (one per batch size and block-table bucket, captured on "
              "first use; off by default until measured on a device; no effect on the CPU or HIP-CPU)");
  s->add_option("--mtp-head", lo.mtp_head,
                "A trained MTP head (safetensors, nextn layout): added to a model without one, or replacing the "
                "checkpoint's MTP tensors of the same names");
}

inline constexpr const char* kKvDtypeHelp =
    "KV cache values: auto (bf16 on a GPU backend; on the CPU bf16 where attention multiplies in bf16 "
    "(AVX512-BF16) and the model is not f32, else f32), f32, bf16 or fp8 (E4M3, unscaled)";
inline void add_kv_dtype_option(CLI::App* s, std::string& kv_dtype) {
  s->add_option("--kv-dtype", kv_dtype, kKvDtypeHelp)
      ->check(CLI::IsMember({"auto", "f32", "bf16", "fp8"}))
      ->capture_default_str();
}

// The same options as command-line arguments (bench --launch-server passes them on to serve).
inline std::vector<std::string> load_option_args(const LoadOptions& lo) {
  std::vector<std::string> v;
  if (lo.load_format != "auto") v.insert(v.end(), {"--load-format", lo.load_format});
  if (!lo.dummy_dtype.empty()) v.insert(v.end(), {"--dummy-dtype", lo.dummy_dtype});
  if (lo.dummy_seed) v.insert(v.end(), {"--dummy-seed", std::to_string(lo.dummy_seed)});
  if (!lo.hf_overrides.empty()) v.insert(v.end(), {"--hf-overrides", lo.hf_overrides});
  if (!lo.mtp_head.empty()) v.insert(v.end(), {"--mtp-head", lo.mtp_head});
  if (lo.gpu_graphs) v.push_back("--gpu-graphs");
  return v;
}

}  // namespace mx::cli
