#pragma once
// Linear layers: y[t, o] = sum_i x[t, i] * W[o, i] for t < n_tokens.
// W is [out, in] row-major as in HF checkpoints; x and y are dense f32 rows.
// Weight representations:
//   F32, BF16 (activations rounded to bf16 on AVX512-BF16: matmul_bf16_activations);
//   MXFP4: w.data = packed E2M1 [out, in/2] (element 2j in the low nibble of byte j),
//     w.scales = E8M0 bytes [out, in/32]; in % 32 == 0. The activations are
//     quantized per token to int8 in blocks of 32 (scale amax/127), once per call,
//     and the kernels take exact integer dot products per block;
//   F8_E4M3: w.scales = f32 [ceil(out/128), ceil(in/128)] (DeepSeek block FP8:
//     W = fp8 * scale[o/128][i/128]), or null for scale 1. With bf16 activations
//     (matmul_bf16_activations) W is also rounded to bf16, as vLLM's CPU path
//     dequantizes block FP8 to bf16.
// The accumulation order of every path is documented in matmul_impl.h.
//
// Batch invariance contract: row t of y is bitwise identical whatever n_tokens,
// the other rows of x, and the thread count are. Every kernel path (GEMV for one
// token, tiled GEMM for many) accumulates each output with the same lane layout
// and the same final reduction order. The engine's "same output whatever else is
// in the batch" guarantee rests on this. The tile shapes come from the tuned-kernel
// registry (backends/registry.h) per weight shape; they do not affect the bits either.
#include <cstdint>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "backends/registry.h"

namespace mx {

// How BF16 weights meet f32 activations: Auto rounds the activations to bf16 where
// matmul_bf16_activations() says so; F32 always multiplies the f32 activations
// (routers, whose top-k a rounding could flip: transformers computes the
// DeepSeek-V3 / GLM-4.5 router in f32 too).
enum class Bf16Act { Auto, F32 };

void matmul(float* y, const float* x, const Tensor& w, int64_t n_tokens, ThreadPool& pool,
            Bf16Act act = Bf16Act::Auto);

// y_i = x W_i^T for n weights that read the same activations (q, k and v; gate and up):
// each ys[i] is bitwise what matmul(ys[i], x, *ws[i], n_tokens, pool) writes, in one
// parallel region: the activations are rounded or quantized once, and the pool joins
// once where three matmuls joined three times (a decode step's small q / k / v GEMVs
// paid a join each). Weights of different dtypes or widths, or more than kMatmulManyMax,
// go one by one.
constexpr int kMatmulManyMax = 4;
void matmul_many(float* const* ys, const float* x, const Tensor* const* ws, int n, int64_t n_tokens,
                 ThreadPool& pool);

// Same as matmul, forcing an ISA (tests and benchmarks compare paths). Throws if the ISA
// is not supported by this CPU or has no kernel for w.dtype.
void matmul_isa(Isa isa, float* y, const float* x, const Tensor& w, int64_t n_tokens,
                ThreadPool& pool);

// Same, with an explicit kernel config instead of the registry's (the tuner; tests).
void matmul_with_config(Isa isa, const KernelConfig& cfg, float* y, const float* x,
                        const Tensor& w, int64_t n_tokens, ThreadPool& pool, Bf16Act act = Bf16Act::Auto);

// The configs the kernels of (isa, dtype) implement (every tile variant, a few
// prefetch distances); the first is the kernels' built-in default. Empty when the
// ISA has no kernel for dtype; one entry when nothing is tunable (scalar).
std::vector<KernelConfig> matmul_candidates(Isa isa, DType dtype);

// Whether BF16 and F8_E4M3 weights on `isa` multiply activations rounded to bf16
// (to nearest even) rather than the f32 activations: true for AVX-512 on CPUs with
// AVX512-BF16 (vdpbf16ps, twice the multiply-adds per instruction), unless switched off by the
// environment (MXSERVE_BF16_ACTIVATIONS=0) or set_matmul_bf16_activations(false). As
// llama.cpp and oneDNN do for bf16 models; the batch-invariance contract holds
// either way (matmul_impl.h). The setting is process-wide; change it only while no
// matmul runs.
bool matmul_bf16_activations(Isa isa);
// Returns the previous setting.
bool set_matmul_bf16_activations(bool on);

// Whether BF16 weights with bf16 activations run on AMX tiles (matmul_bf16_amx.cpp; an
// accumulation scheme of its own, matmul_impl.h, taken by every such matmul of the
// process, so batch invariance holds): on CPUs with AMX-BF16 whose OS grants the tile
// state and whose TDPBF16PS gives the Intel SDM's bits (checked once), unless switched
// off by the environment (MXSERVE_AMX=0) or set_matmul_amx(false). MXSERVE_AMX=emulate
// runs the same scheme on software tiles instead (slow: to run the suite or a model as
// an AMX machine would, on one without). Process-wide, as set_matmul_bf16_activations;
// the setter returns the previous setting. The status says which, and why not
// ("on: ...", "off: ...").
bool matmul_amx(Isa isa);
bool set_matmul_amx(bool on);
std::string matmul_amx_status();
// "amx", "amx-emulated" (MXSERVE_AMX=emulate) or "" (off): for file names.
const char* matmul_amx_name(Isa isa);
// The ISA's name, and " + " that where AMX is on (e.g. "avx512 + amx"): for logs.
std::string matmul_isa_label(Isa isa);

}  // namespace mx
