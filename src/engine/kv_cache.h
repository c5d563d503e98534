#pragma once
// The engine's side of the KV cache: the --kv-dtype choice. The pool and the
// per-sequence block tables are models/kv_cache.h (the model's forward uses
// them, so they live below the engine).
#include <string>

#include "core/dtype.h"
#include "backends/backend.h"
#include "models/kv_cache.h"

namespace mx {

// --kv-dtype: "f32", "bf16", "fp8" (E4M3), or "auto": bf16 on a GPU backend
// (as vLLM and sglang keep it in the model's dtype there), f32 on the CPU
// (whose attention kernels are f32; the KV of small batches is small).
DType kv_cache_dtype(const std::string& spec, const Backend* backend);

}  // namespace mx
