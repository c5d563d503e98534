#pragma once
// Linear layers: y[t, o] = sum_i x[t, i] * W[o, i] for t < n_tokens.
// W is [out, in] row-major as in HF checkpoints (F32 or BF16 for now; quantized
// formats plug into the same entry point). x and y are dense f32 rows.
//
// Batch invariance contract: row t of y is bitwise identical whatever n_tokens,
// the other rows of x, and the thread count are. Every kernel path (GEMV for one
// token, tiled GEMM for many) accumulates each output with the same lane layout
// and the same final reduction order. The engine's "same output whatever else is
// in the batch" guarantee rests on this.
#include <cstdint>

#include "core/cpu_features.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace mx {

void matmul(float* y, const float* x, const Tensor& w, int64_t n_tokens, ThreadPool& pool);

// Same, forcing an ISA (tests and benchmarks compare paths). Throws if the ISA
// is not supported by this CPU or has no kernel for w.dtype.
void matmul_isa(Isa isa, float* y, const float* x, const Tensor& w, int64_t n_tokens,
                ThreadPool& pool);

}  // namespace mx
