#pragma once
// Synthetic checkpoints for tests and benchmarks: config.json + (sharded)
// safetensors with exactly the tensor names a real HF checkpoint of the family
// has, random weights with realistic scales. No network, no real weights needed.
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace mx {

struct SyntheticSpec {
  std::string arch = "llama";  // llama | qwen2 | qwen3 | glm4_moe | deepseek_v3 | qwen3_moe
  std::string preset = "tiny";    // tiny | small | medium
  DType dtype = DType::BF16;      // F32 or BF16
  uint64_t seed = 0;
  size_t max_shard_bytes = size_t(2) << 30;  // HF's default shard size is a few GB
};

// Writes DIR/config.json and the safetensors files. Returns the parameter count.
int64_t write_synthetic_model(const std::string& dir, const SyntheticSpec& spec);

}  // namespace mx
