// The tiled attention kernel (attention_impl.h) on AVX-512: 16 lanes, rows of a
// tile in two zmm vectors, 8 keys (Q.K^T) or 8 value dims (P.V) per micro-tile
// (16 accumulators of 32 registers).
#include <immintrin.h>

#include "backends/cpu/attention_impl.h"
#include "backends/cpu/simd_avx512.h"

namespace mx::attn_detail {
namespace {

struct Avx512Attn : simd::Avx512 {
  static constexpr int KS = 8, DS = 8;
};

}  // namespace

Kernel avx512_attention_kernel() { return Tiled<Avx512Attn>::kernel(); }

}  // namespace mx::attn_detail
