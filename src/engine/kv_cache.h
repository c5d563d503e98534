#pragma once
// The engine's side of the KV cache: the --kv-dtype choice. The pool and the
// per-sequence block tables are models/kv_cache.h (the model's forward uses
// them, so they live below the engine).
#include <string>

#include "core/dtype.h"
#include "backends/backend.h"
#include "models/kv_cache.h"
#include "models/model.h"

namespace mx {

// --kv-dtype: "f32", "bf16", "fp8" (E4M3), or "auto":
//   on a GPU backend, bf16 (as vLLM and sglang keep it in the model's dtype there);
//   on the CPU, bf16 where attention multiplies a bf16 cache in bf16
//   (backends/cpu/attention.h attention_products: AVX512-BF16) and the model's
//   weights are not mostly f32, as llama.cpp keeps an f16 cache and multiplies
//   f16 Q and K: half the KV memory and of the bytes attention reads, and
//   vdpbf16ps products, for the roundings of q, k, v and the weights P (what
//   they cost is measured: tests/models/test_bf16_activations.cpp, BENCHMARKS.md).
//   Otherwise f32 (an f32 model stays f32 end to end; the f32 kernels read an
//   f32 cache in place).
DType kv_cache_dtype(const std::string& spec, const Model& model);

}  // namespace mx
