#pragma once
// Private interface between the matmul dispatcher (matmul.cpp) and the per-ISA
// kernels (matmul.cpp scalar, matmul_avx2.cpp, matmul_avx512.cpp).
//
// Accumulation scheme (the batch-invariance argument; see matmul.h):
//   Each ISA has a vector width V (scalar 8 "lanes" in an array, AVX2 8, AVX-512 16).
//   Every output y[t,o] owns exactly ONE V-lane accumulator, starting at +0.
//   For k = 0, 1, ... over the full V-element chunks of the row, in increasing k:
//       acc = fma(W[o, kV .. kV+V), x[t, kV .. kV+V), acc)
//   The final partial chunk (in % V elements) is loaded zero-padded (masked load or
//   a padded copy) and applied with one more identical FMA; padded lanes add
//   0*0 = +0, which leaves any accumulator that is reachable from +0 unchanged.
//   The accumulator is then reduced to a float by one fixed pairwise tree per ISA
//   (hsum in each kernel file: lane l + lane l + V/2, recursively).
//   Scalar: acc[l] += w * x (separate multiply and add: the baseline ISA has no FMA),
//   the partial chunk just skips the missing lanes, and the tree is AVX2's.
//   A kernel tile computes several outputs at once (several rows and/or tokens),
//   but each output still sees exactly this sequence of operations, so the tile
//   shape, the tile an output lands in, n_tokens and the thread split (always by
//   output row) cannot change its bits. Different ISAs give different bits.
//   Only explicit intrinsics are used for the float math in the SIMD files, so
//   compiler FMA contraction cannot make one code path differ from another.
#include <algorithm>
#include <cstdint>

#include "core/dtype.h"

namespace mx::matmul_detail {

struct Args {
  float* y;        // [n_tokens, out]
  const float* x;  // [n_tokens, in]
  const void* w;   // [out, in], F32 or BF16
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

// The loop nest shared by the SIMD kernels, over rows [r0, r1) and all tokens.
// Tiles only group outputs (see above), so the loop order is free to follow the
// caches. P is a per-ISA policy:
//   gemv_rows, tile_tok, tile_rows: tile shapes;
//   P::gemv(a, t, r0): token t, rows [r0, r0 + gemv_rows);
//   P::template tile<TT, R>(a, t0, r0): tokens [t0, t0 + TT), rows [r0, r0 + R).
template <class P>
void drive_rows(const Args& a, int64_t r0, int64_t r1) {
  const int64_t n = a.n_tokens;
  int64_t r = r0;
  if (n < P::tile_tok) {
    // Decode: stream each block of weight rows once; it stays in L1/L2 across tokens.
    for (; r + P::gemv_rows <= r1; r += P::gemv_rows)
      for (int64_t t = 0; t < n; ++t) P::gemv(a, t, r);
  } else {
    // Prefill: tokens in chunks whose activations (256 KiB) stay in L2 while every
    // row block of this range streams past them; without this, long batches re-read
    // x from DRAM once per row block (measured: 2x slower at 1024 tokens x 4864).
    // A multiple of tile_tok, so only the last chunk has a partial tile.
    constexpr int64_t kChunkBytes = 256 << 10;
    const int64_t chunk = std::max<int64_t>(
        P::tile_tok, kChunkBytes / (std::max<int64_t>(a.in, 1) * 4) / P::tile_tok * P::tile_tok);
    const int64_t r_full = r0 + (r1 - r0) / P::tile_rows * P::tile_rows;
    for (int64_t c0 = 0; c0 < n; c0 += chunk) {
      const int64_t c1 = std::min(n, c0 + chunk);
      for (r = r0; r < r_full; r += P::tile_rows) {
        int64_t t = c0;
        for (; t + P::tile_tok <= c1; t += P::tile_tok)
          P::template tile<P::tile_tok, P::tile_rows>(a, t, r);
        for (; t < c1; ++t) P::template tile<1, P::tile_rows>(a, t, r);
      }
    }
    r = r_full;
  }
  // Rows left over by the block shape: one row at a time.
  for (; r < r1; ++r) {
    int64_t t = 0;
    for (; t + P::tile_tok <= n; t += P::tile_tok) P::template tile<P::tile_tok, 1>(a, t, r);
    for (; t < n; ++t) P::template tile<1, 1>(a, t, r);
  }
}

Kernels scalar_kernels();
Kernels avx2_kernels();
Kernels avx512_kernels();

}  // namespace mx::matmul_detail
