#pragma once
// Private interface between the matmul dispatcher (matmul.cpp) and the per-ISA
// kernels (matmul.cpp scalar, matmul_avx2.cpp, matmul_avx512.cpp).
//
// Accumulation scheme (the batch-invariance argument; see matmul.h):
//   Each ISA has a vector width V (scalar 8 "lanes" in an array, AVX2 8, AVX-512 16).
//   Every output y[t,o] owns exactly ONE V-lane accumulator, starting at +0.
//   For k = 0, 1, ... over the full V-element chunks of the row, in increasing k:
//       acc = fma(W[o, kV .. kV+V), x[t, kV .. kV+V), acc)      (scalar: acc[l] += w*x)
//   The final partial chunk (in % V elements) is loaded zero-padded (masked load or
//   a padded copy) and applied with one more identical FMA; padded lanes add
//   0*0 = +0, which leaves any accumulator that is reachable from +0 unchanged.
//   The accumulator is then reduced to a float by one fixed tree per ISA
//   (hsum in each kernel file).
//   A kernel tile computes several outputs at once (several rows and/or tokens),
//   but each output still sees exactly this sequence of operations, so the tile
//   shape, the tile an output lands in, n_tokens and the thread split (always by
//   output row) cannot change its bits. Different ISAs give different bits.
//   Only explicit intrinsics are used for the float math in the SIMD files, so
//   compiler FMA contraction cannot make one code path differ from another.
#include <cstdint>

#include "core/dtype.h"

namespace mx::matmul_detail {

struct Args {
  float* y;         // [n_tokens, out]
  const float* x;   // [n_tokens, in]
  const void* w;    // [out, in], F32 or BF16
  int64_t n_tokens, out, in;
};

// Computes y[t, o] for all t and o in [r0, r1).
using RowsFn = void (*)(const Args& a, int64_t r0, int64_t r1);

struct Kernels {
  RowsFn f32 = nullptr;
  RowsFn bf16 = nullptr;
  // Row granularity at which the kernel tiles best; the thread split aligns to it.
  int64_t row_block = 1;
};

Kernels scalar_kernels();
Kernels avx2_kernels();
Kernels avx512_kernels();

}  // namespace mx::matmul_detail
