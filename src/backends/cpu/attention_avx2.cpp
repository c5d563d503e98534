// The tiled attention kernel (attention_impl.h) on AVX2 + FMA: 8 lanes, rows of
// a tile in two ymm vectors, 4 keys (Q.K^T) or 4 value dims (P.V) per
// micro-tile (8 accumulators of 16 registers). Masks are all-ones lanes.
#include <immintrin.h>

#include "backends/cpu/attention_impl.h"
#include "backends/cpu/simd_avx2.h"

namespace mx::attn_detail {
namespace {

struct Avx2Attn : simd::Avx2 {
  static constexpr int KS = 4, DS = 4;
};

}  // namespace

Kernel avx2_attention_kernel() { return Tiled<Avx2Attn>::kernel(); }

}  // namespace mx::attn_detail
