#include "engine/kv_cache.h"

#include "core/error.h"

namespace mx {

DType kv_cache_dtype(const std::string& spec, const Backend* backend) {
  if (spec == "auto") return backend && !backend->host_memory() ? DType::BF16 : DType::F32;
  if (spec == "f32") return DType::F32;
  if (spec == "bf16") return DType::BF16;
  if (spec == "fp8") return DType::F8_E4M3;
  fail("--kv-dtype {}: expected auto, f32, bf16 or fp8", spec);
}

}  // namespace mx
