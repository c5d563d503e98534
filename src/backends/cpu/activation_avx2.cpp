// silu_mul (activation.h) on AVX2 + FMA: 8 lanes.
#include "backends/cpu/activation.h"
#include "backends/cpu/activation_impl.h"
#include "backends/cpu/simd_avx2.h"

namespace mx::activation_detail {
SiluMulFn avx2_silu_mul() { return &Silu<simd::Avx2>::silu_mul; }
}  // namespace mx::activation_detail
