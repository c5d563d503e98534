// Mixture-of-experts on the GPU: routing on device, tokens sorted by expert,
// a grouped GEMM per projection over each expert's tokens, then a fixed-order
// combine (backends/backend.h moe_ffn).
//   sort: counts[e] by atomics, an exclusive scan into offsets, then each
//     (token, slot) pair takes a place in its expert's range by atomics: the
//     order inside a range varies, but every pair's result is computed and
//     stored on its own, so nothing downstream depends on it;
//   grouped GEMM: grid (row blocks, experts); a block streams its expert's
//     weight rows once per tile of 4 of that expert's tokens; gate and up run
//     in the same pass and write silu(g) * u;
//   combine: out[t] = sum over its k slots in ascending expert order.
#include <algorithm>

#include "backends/gpu/gpu_kernels.h"
#include "backends/route_impl.h"

namespace mx {
namespace MX_GPU_NS {
namespace {

constexpr int kTileTokens = 4, kRowsPerBlock = 16;

__global__ void route_kernel(int32_t* ids, float* w, const float* logits, int64_t T, RouteArgs r) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= T) return;
  route_token(logits + t * r.n_experts, r.n_experts, r.k, r.sigmoid, r.bias, r.n_group, r.topk_group, r.norm_topk,
              r.scaling, ids + t * r.k, w + t * r.k);
}

__global__ void count_kernel(int* counts, const int32_t* ids, int64_t n_pairs, int E) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n_pairs; p += int64_t(gridDim.x) * blockDim.x)
    if (ids[p] >= 0 && ids[p] < E) atomicAdd(&counts[ids[p]], 1);
}

__global__ void scan_kernel(const int* counts, int* offsets, int* cursor, int E) {
  if (threadIdx.x != 0) return;
  int acc = 0;
  for (int e = 0; e < E; ++e) offsets[e] = cursor[e] = acc, acc += counts[e];
  offsets[E] = acc;
}

__global__ void scatter_kernel(int* sorted, int* cursor, const int32_t* ids, int64_t n_pairs, int E) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n_pairs; p += int64_t(gridDim.x) * blockDim.x)
    if (ids[p] >= 0 && ids[p] < E) sorted[atomicAdd(&cursor[ids[p]], 1)] = int(p);
}

// GATE_UP: act[p, r] = silu(gate_e[r] . x[p / k]) * (up_e[r] . x[p / k]);
// else:    slot[p, r] = down_e[r] . act[p].
template <WFmt F, bool GATE_UP>
__global__ void grouped_kernel(float* dst, const float* src, WStack wa, WStack wb, const int* sorted,
                               const int* offsets, int k, bool vec) {
  const int e = blockIdx.y, lane = threadIdx.x % MX_WARP, wid = threadIdx.x / MX_WARP, nw = blockDim.x / MX_WARP;
  const int begin = offsets[e], end = offsets[e + 1];
  if (begin == end) return;  // an idle expert
  const WView a = wa.at(e);
  const WView b = GATE_UP ? wb.at(e) : a;
  const int64_t r0 = int64_t(blockIdx.x) * kRowsPerBlock, rows = a.out, in = a.in;
  const int64_t r1 = r0 + kRowsPerBlock < rows ? r0 + kRowsPerBlock : rows;
  for (int j0 = begin; j0 < end; j0 += kTileTokens) {
    const int nt = end - j0 < kTileTokens ? end - j0 : kTileTokens;
    int pair[kTileTokens];
    const float* xr[kTileTokens];
#pragma unroll
    for (int t = 0; t < kTileTokens; ++t) {
      pair[t] = sorted[j0 + (t < nt ? t : 0)];
      xr[t] = src + int64_t(GATE_UP ? pair[t] / k : pair[t]) * in;
    }
    for (int64_t rr = wid; rr < (kRowsPerBlock + nw - 1) / nw * nw; rr += nw) {  // uniform rounds (matmul.cu)
      const int64_t r = r0 + rr < r1 ? r0 + rr : r1 - 1;
      const bool store = r0 + rr < r1;
      float ga[kTileTokens] = {}, ub[kTileTokens] = {};
      row_dot_partial<F, kTileTokens>(a, r, xr, nt, vec, ga);
      if (GATE_UP) row_dot_partial<F, kTileTokens>(b, r, xr, nt, vec, ub);
#pragma unroll
      for (int t = 0; t < kTileTokens; ++t) {
        const float g = warp_sum(ga[t]);
        const float u = GATE_UP ? warp_sum(ub[t]) : 0.0f;
        if (store && t < nt && lane == 0)
          dst[int64_t(pair[t]) * rows + r] = GATE_UP ? g / (1.0f + expf(-g)) * u : g;
      }
    }
  }
}

// A pair whose id is outside [0, E) was never sorted (count/scatter skip it), so
// its slot holds no result: it adds nothing, rather than stale workspace.
__global__ void combine_kernel(float* out, const float* slots, const float* w, const int32_t* ids, int E, int64_t T,
                               int k, int64_t D) {
  const int64_t n = T * D;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = e / D, i = e % D;
    float acc = 0.0f;
    for (int j = 0; j < k; ++j)
      if (ids[t * k + j] >= 0 && ids[t * k + j] < E) acc += w[t * k + j] * slots[(t * k + j) * D + i];
    out[e] = acc;
  }
}

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

struct Workspace {
  int *counts, *offsets, *cursor, *sorted;
  float *act, *slots;
};

Workspace carve(void* base, int64_t T, int k, int E, int64_t D, int64_t H) {
  char* p = static_cast<char*>(base);
  Workspace w;
  auto take = [&](size_t bytes) {
    char* r = p;
    p += align256(bytes);
    return r;
  };
  w.counts = reinterpret_cast<int*>(take(size_t(E) * 4));
  w.offsets = reinterpret_cast<int*>(take(size_t(E + 1) * 4));
  w.cursor = reinterpret_cast<int*>(take(size_t(E) * 4));
  w.sorted = reinterpret_cast<int*>(take(size_t(T) * k * 4));
  w.act = reinterpret_cast<float*>(take(size_t(T) * k * H * 4));
  w.slots = reinterpret_cast<float*>(take(size_t(T) * k * D * 4));
  return w;
}

template <WFmt F>
void run_grouped(gpuStream_t s, const Workspace& ws, const float* x, int k, const DevWeight& gate,
                 const DevWeight& up, const DevWeight& down, bool vec_x) {
  const int E = gate.experts;
  const dim3 g1(unsigned((gate.out + kRowsPerBlock - 1) / kRowsPerBlock), unsigned(E));
  MX_LAUNCH((grouped_kernel<F, true>), g1, dim3(kBlock), 0, s, ws.act, x, stack_of(gate), stack_of(up), ws.sorted, ws.offsets, k,
            vec_x && gate.in % 8 == 0);
  MX_GPU_LAUNCHED("grouped_kernel<gate_up>");
  const dim3 g2(unsigned((down.out + kRowsPerBlock - 1) / kRowsPerBlock), unsigned(E));
  MX_LAUNCH((grouped_kernel<F, false>), g2, dim3(kBlock), 0, s, ws.slots, ws.act, stack_of(down), stack_of(down), ws.sorted, ws.offsets,
            k, down.in % 8 == 0);
  MX_GPU_LAUNCHED("grouped_kernel<down>");
}

}  // namespace

void launch_moe_route(gpuStream_t s, int32_t* ids, float* w, const float* logits, int64_t T, const RouteArgs& r) {
  if (T <= 0) return;
  if (r.n_experts <= 0 || r.n_experts > kMaxRouteExperts || r.k <= 0 || r.k > r.n_experts)
    throw std::runtime_error("gpu moe_route: bad expert counts");
  const int threads = 64;  // one token per thread; routing keeps ~12 KiB of scratch per thread
  MX_LAUNCH(route_kernel, dim3(unsigned((T + threads - 1) / threads)), dim3(threads), 0, s, ids, w, logits, T, r);
  MX_GPU_LAUNCHED("route_kernel");
}

size_t moe_workspace_bytes(int64_t T, int k, int E, int64_t D, int64_t H) {
  return align256(size_t(E) * 4) * 2 + align256(size_t(E + 1) * 4) + align256(size_t(T) * k * 4) +
         align256(size_t(T) * k * H * 4) + align256(size_t(T) * k * D * 4);
}

void launch_moe_ffn(gpuStream_t s, void* workspace, float* out, const float* x, const int32_t* ids,
                    const float* weights, int64_t T, int k, const DevWeight& gate, const DevWeight& up,
                    const DevWeight& down) {
  if (T <= 0) return;
  const int E = gate.experts;
  const int64_t D = gate.in, H = gate.out;
  if (up.experts != E || down.experts != E || up.out != H || up.in != D || down.out != D || down.in != H ||
      gate.dtype != up.dtype || gate.dtype != down.dtype)
    throw std::runtime_error("gpu moe_ffn: gate/up [E, H, D] and down [E, D, H] of one dtype expected");
  const Workspace ws = carve(workspace, T, k, E, D, H);
  const int64_t n_pairs = T * k;
  MX_GPU_CHECK(gpuMemsetAsync(ws.counts, 0, size_t(E) * 4, s));
  const unsigned pb = unsigned(std::min<int64_t>((n_pairs + kBlock - 1) / kBlock, 4096));
  MX_LAUNCH(count_kernel, dim3(pb), dim3(kBlock), 0, s, ws.counts, ids, n_pairs, E);
  MX_LAUNCH(scan_kernel, dim3(1), dim3(64), 0, s, ws.counts, ws.offsets, ws.cursor, E);
  MX_LAUNCH(scatter_kernel, dim3(pb), dim3(kBlock), 0, s, ws.sorted, ws.cursor, ids, n_pairs, E);
  MX_GPU_LAUNCHED("moe sort");
  const bool vec_x = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  switch (wfmt_of(gate.dtype)) {
    case WFmt::F32: run_grouped<WFmt::F32>(s, ws, x, k, gate, up, down, vec_x); break;
    case WFmt::BF16: run_grouped<WFmt::BF16>(s, ws, x, k, gate, up, down, vec_x); break;
    case WFmt::MXFP4: run_grouped<WFmt::MXFP4>(s, ws, x, k, gate, up, down, vec_x); break;
    case WFmt::FP8: run_grouped<WFmt::FP8>(s, ws, x, k, gate, up, down, vec_x); break;
  }
  const unsigned cb = unsigned(std::min<int64_t>((T * D + kBlock - 1) / kBlock, 65535));
  MX_LAUNCH(combine_kernel, dim3(cb), dim3(kBlock), 0, s, out, ws.slots, weights, ids, E, T, k, D);
  MX_GPU_LAUNCHED("combine_kernel");
}

}  // namespace MX_GPU_NS
}  // namespace mx
