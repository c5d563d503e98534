#pragma once
// SwiGLU's gate, y[i] = silu(g[i]) * u[i] = g[i] / (1 + e^-g[i]) * u[i], on the
// CPU's vector units. Element-wise, so an element's bits depend only on its own
// inputs and the ISA, never on n, the batch or the thread split. The scalar ISA
// uses libm's expf; AVX2 and AVX-512 the vector exp of simd_exp.h (Cephes'
// polynomial, ~1 ulp), which differs from libm in the last bits, and clamps its
// argument at 88 (AVX2) / 88.5: for g below about -88 the result is g * u / e^88
// (|y| < 1e-36 |u|) instead of the true ~g e^g u, and silu(-inf) * u is -inf * u
// where libm gives NaN. SwiGLU gates never reach that range in practice. y may
// alias g or u.
#include <cstdint>

#include "core/cpu_features.h"

namespace mx {

void silu_mul_isa(Isa isa, float* y, const float* g, const float* u, int64_t n);

namespace activation_detail {
using SiluMulFn = void (*)(float* y, const float* g, const float* u, int64_t n);
SiluMulFn avx512_silu_mul();
SiluMulFn avx2_silu_mul();
}  // namespace activation_detail

}  // namespace mx
