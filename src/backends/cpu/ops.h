#pragma once
// Element-wise and row-wise ops of a transformer block, f32 activations.
#include <cstdint>

#include "core/tensor.h"

namespace mx {

// y[r] = x[r] / rms(x[r]) * w, rows of length dim. w may be F32 or BF16.
void rmsnorm(float* y, const float* x, const Tensor& w, int64_t rows, int64_t dim, float eps);

// x[r] += b for each row (bias of a Linear); b F32 or BF16 of length dim.
void add_bias(float* x, const Tensor& b, int64_t rows, int64_t dim);

// y = silu(g) * u, n elements (SwiGLU), on best_isa() (activation.h).
void silu_mul(float* y, const float* g, const float* u, int64_t n);

// x += y, n elements.
void add_inplace(float* x, const float* y, int64_t n);

// In-place softmax over n values; returns nothing, handles -inf entries.
void softmax_inplace(float* x, int64_t n);

// Dot product of two f32 vectors, fixed reduction order.
float dot_f32(const float* a, const float* b, int64_t n);
// y += a * x
void axpy_f32(float* y, float a, const float* x, int64_t n);

// Rotary position embedding (models/rope.h has the two pairings and where the
// parameters come from): rotates the first rotary_dim dims of n_heads vectors
// spaced `stride` floats apart for position pos; interleaved pairs 2i with 2i+1,
// otherwise i with i + rotary_dim/2 (HF rotate_half). inv_freq[rotary_dim / 2];
// mscale (yarn's attention factor) scales cos and sin. rotary_dim <= 1024.
void rope_rotate(float* x, int n_heads, int stride, int pos, int rotary_dim, bool interleaved, float mscale,
                 const float* inv_freq);

}  // namespace mx
