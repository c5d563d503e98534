#include "engine/kv_cache.h"

#include "core/error.h"
#include "backends/cpu/attention.h"

namespace mx {
namespace {

// Whether F32 tensors hold most of the model's parameters.
bool mostly_f32(const Model& model) {
  int64_t f32 = 0, all = 0;
  for (const BoundParam& p : model.weight_map()) {
    all += p.params;
    if (p.dtype == DType::F32) f32 += p.params;
  }
  return 2 * f32 > all;
}

}  // namespace

DType kv_cache_dtype(const std::string& spec, const Model& model) {
  if (spec == "auto") {
    const Backend* backend = model.backend();
    if (backend && !backend->host_memory()) return DType::BF16;
    const bool bf16_attention = attention_products(best_isa(), DType::BF16) == AttnProducts::Bf16;
    return bf16_attention && !mostly_f32(model) ? DType::BF16 : DType::F32;
  }
  if (spec == "f32") return DType::F32;
  if (spec == "bf16") return DType::BF16;
  if (spec == "fp8") return DType::F8_E4M3;
  fail("--kv-dtype {}: expected auto, f32, bf16 or fp8", spec);
}

}  // namespace mx
