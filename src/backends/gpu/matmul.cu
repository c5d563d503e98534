// Linear layers on the GPU: y[t, o] = x[t] . W[o], weights decoded in registers
// from F32 / BF16 / MXFP4 / F8_E4M3 (gpu_kernels.h), f32 accumulation.
//   decode (T <= 8 per launch row): GEMV, one warp per weight row, each lane
//     takes 8 consecutive weights at a time and applies them to a tile of up to
//     token_tile tokens, so every weight byte is read once per token tile;
//   prefill (T > 8): a 64 x 64 (rows x tokens) shared-memory tiled GEMM, 32 deep.
// Outputs are not bitwise the CPU's (another summation order); tests compare
// within tolerance.
#include <algorithm>

#include "backends/gpu/gpu_kernels.h"

namespace mx {
namespace MX_GPU_NS {

WFmt wfmt_of(DType t) {
  switch (t) {
    case DType::F32: return WFmt::F32;
    case DType::BF16: return WFmt::BF16;
    case DType::MXFP4: return WFmt::MXFP4;
    case DType::F8_E4M3: return WFmt::FP8;
    default: throw std::runtime_error("gpu matmul: no kernel for dtype " + std::to_string(int(t)) + " (F32, BF16, MXFP4, F8_E4M3)");
  }
}

WView view_of(const DevWeight& w, int e) {
  return {static_cast<const char*>(w.data) + size_t(e) * w.data_bytes(),
          w.scales ? static_cast<const char*>(w.scales) + size_t(e) * w.scale_bytes() : nullptr, w.out, w.in,
          w.scale_cols};
}

WStack stack_of(const DevWeight& w) { return {view_of(w, 0), w.data_bytes(), w.scale_bytes()}; }

namespace {

template <WFmt F, int NT>
__global__ void gemv_kernel(float* y, const float* x, WView w, int64_t T, int rows_per_block, bool vec) {
  const int lane = threadIdx.x % MX_WARP, wid = threadIdx.x / MX_WARP, nw = blockDim.x / MX_WARP;
  const int64_t t0 = int64_t(blockIdx.y) * NT;
  const int nt = int(T - t0 < NT ? T - t0 : NT);
  const int64_t r0 = int64_t(blockIdx.x) * rows_per_block;
  const int64_t r1 = r0 + rows_per_block < w.out ? r0 + rows_per_block : w.out;
  // Every warp takes the same number of rounds (a warp past r1 still joins the
  // shuffles), so warp-synchronous code is uniform across the block.
  for (int64_t rr = wid; rr < (rows_per_block + nw - 1) / nw * nw; rr += nw) {
    const int64_t r = r0 + rr < r1 ? r0 + rr : r1 - 1;  // a clamped row computes but does not store
    const bool store = r0 + rr < r1;
    float acc[NT];
    const float* xr[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f, xr[t] = x + (t0 + (t < nt ? t : 0)) * w.in;
    row_dot_partial<F, NT>(w, r, xr, nt, vec, acc);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float s = warp_sum(acc[t]);
      if (store && t < nt && lane == 0) y[(t0 + t) * w.out + r] = s;
    }
  }
}

constexpr int kTile = 64, kDepth = 32;

// 256 threads; thread (tr, tc) computes rows tr*4.. x tokens tc*4.. of the tile.
template <WFmt F>
__global__ void gemm_kernel(float* y, const float* x, WView w, int64_t T) {
  __shared__ float ws[kDepth][kTile + 1];  // [k][row]
  __shared__ float xs[kDepth][kTile + 1];  // [k][token]
  const int tid = threadIdx.x, tr = tid / 16, tc = tid % 16;
  const int64_t row0 = int64_t(blockIdx.x) * kTile, tok0 = int64_t(blockIdx.y) * kTile;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  const int lr = tid / 4, kc = (tid % 4) * 8;  // this thread's load: row / token lr, depth kc..kc+8
  for (int64_t k0 = 0; k0 < w.in; k0 += kDepth) {
    float v[8];
    if (row0 + lr < w.out) load8<F>(w, row0 + lr, k0 + kc, v);
    else
      for (int j = 0; j < 8; ++j) v[j] = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) ws[kc + j][lr] = v[j];
    const int64_t t = tok0 + lr;
#pragma unroll
    for (int j = 0; j < 8; ++j) xs[kc + j][lr] = t < T ? x[t * w.in + k0 + kc + j] : 0.0f;
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kDepth; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = ws[kk][tr * 4 + i], b[i] = xs[kk][tc * 4 + i];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t r = row0 + tr * 4 + i, t = tok0 + tc * 4 + j;
      if (r < w.out && t < T) y[t * w.out + r] = acc[i][j];
    }
}

template <WFmt F>
void run(gpuStream_t s, float* y, const float* x, const WView& w, int64_t T, const KernelConfig& cfg) {
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (T > 8 && w.in % kDepth == 0 && aligned) {
    const dim3 grid(unsigned((w.out + kTile - 1) / kTile), unsigned((T + kTile - 1) / kTile));
    MX_LAUNCH((gemm_kernel<F>), grid, dim3(256), 0, s, y, x, w, T);
    MX_GPU_LAUNCHED("gemm_kernel");
    return;
  }
  const int rows = std::max(1, cfg.gemv_rows);
  const bool vec = w.in % 8 == 0 && aligned;
  auto go = [&](auto nt_const) {
    constexpr int NT = decltype(nt_const)::value;
    const dim3 grid(unsigned((w.out + rows - 1) / rows), unsigned((T + NT - 1) / NT));
    MX_LAUNCH((gemv_kernel<F, NT>), grid, dim3(kBlock), 0, s, y, x, w, T, rows, vec);
    MX_GPU_LAUNCHED("gemv_kernel");
  };
  const int tile = std::min<int64_t>(T, std::max(1, cfg.tile_tokens));
  if (tile <= 1) go(std::integral_constant<int, 1>());
  else if (tile <= 2) go(std::integral_constant<int, 2>());
  else if (tile <= 4) go(std::integral_constant<int, 4>());
  else go(std::integral_constant<int, 8>());
}

}  // namespace

void launch_matmul(gpuStream_t s, float* y, const float* x, const DevWeight& w, int64_t T,
                   const KernelConfig& cfg) {
  if (T <= 0 || w.out <= 0) return;
  if (w.dtype == DType::MXFP4 && w.in % 32 != 0)
    throw std::runtime_error("gpu matmul: MXFP4 rows must be a multiple of 32 long");
  const WView v = view_of(w, 0);
  switch (wfmt_of(w.dtype)) {
    case WFmt::F32: return run<WFmt::F32>(s, y, x, v, T, cfg);
    case WFmt::BF16: return run<WFmt::BF16>(s, y, x, v, T, cfg);
    case WFmt::MXFP4: return run<WFmt::MXFP4>(s, y, x, v, T, cfg);
    case WFmt::FP8: return run<WFmt::FP8>(s, y, x, v, T, cfg);
  }
}

}  // namespace MX_GPU_NS
}  // namespace mx
