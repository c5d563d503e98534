// silu_mul (activation.h) on AVX-512: 16 lanes.
#include "backends/cpu/activation.h"
#include "backends/cpu/activation_impl.h"
#include "backends/cpu/simd_avx512.h"

namespace mx::activation_detail {
SiluMulFn avx512_silu_mul() { return &Silu<simd::Avx512>::silu_mul; }
}  // namespace mx::activation_detail
