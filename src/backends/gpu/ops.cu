// Row-wise and element-wise ops of a transformer block on the GPU, and sampling.
#include <algorithm>
#include <cmath>

#include "backends/gpu/gpu_kernels.h"
#include "backends/fill_impl.h"
#include "backends/sample_impl.h"

namespace mx {
namespace MX_GPU_NS {
namespace {

unsigned blocks_for(int64_t n) { return unsigned(std::min<int64_t>((n + kBlock - 1) / kBlock, 65535)); }

__global__ void rmsnorm_kernel(float* y, const float* x, const float* w, int dim, int64_t stride, float eps) {
  __shared__ float red[32];
  const float* xr = x + int64_t(blockIdx.x) * stride;
  float* yr = y + int64_t(blockIdx.x) * stride;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
  const float inv = 1.0f / sqrtf(block_sum(ss, red) / float(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = xr[i] * inv * w[i];
}

__global__ void copy_rows_kernel(float* dst, int64_t ds, const float* src, int64_t ss, int64_t width) {
  const int64_t r = blockIdx.x;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) dst[r * ds + i] = src[r * ss + i];
}

__global__ void add_bias_kernel(float* x, const float* b, int64_t n, int dim) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += b[i % dim];
}

__global__ void silu_mul_kernel(float* y, const float* g, const float* u, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float a = g[i];
    y[i] = a / (1.0f + expf(-a)) * u[i];
  }
}

__global__ void fill_kernel(void* dst, int code, int64_t n, uint64_t cols, uint64_t stride, uint64_t first, float lo,
                            float hi, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    fill_one(dst, code, uint64_t(i), fill_source_index(uint64_t(i), cols, stride, first), lo, hi, seed);
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += y[i];
}

template <bool BF16>
__global__ void embed_kernel(float* x, const void* table, const int32_t* ids, int64_t vocab, int64_t dim) {
  const int64_t t = blockIdx.x;
  int64_t id = ids[t];
  if (id == -1) {  // vocab parallel: another rank's row
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) x[t * dim + i] = 0.0f;
    return;
  }
  if (id < 0 || id >= vocab) id = 0;  // the host checked the ids; never read out of bounds
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    x[t * dim + i] = BF16 ? bf16_bits_to_f32(static_cast<const uint16_t*>(table)[id * dim + i])
                          : static_cast<const float*>(table)[id * dim + i];
}

// One thread per (token, head, rotated pair). Angles in double, as on the CPU.
__global__ void rope_kernel(float* x, const int32_t* pos, int64_t T, int n_heads, int token_stride,
                            int head_stride, RopeArgs r) {
  const int half = r.rotary_dim / 2;
  const int64_t n = T * n_heads * half;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(e % half);
    const int64_t th = e / half, t = th / n_heads, h = th % n_heads;
    const double ang = double(pos[t]) * double(r.inv_freq[i]);
    const float c = float(cos(ang)) * r.mscale, s = float(sin(ang)) * r.mscale;
    float* v = x + t * token_stride + h * head_stride;
    float* p0 = r.interleaved ? v + 2 * i : v + i;
    float* p1 = r.interleaved ? v + 2 * i + 1 : v + i + half;
    const float a = *p0, b = *p1;
    *p0 = a * c - b * s;
    *p1 = b * c + a * s;
  }
}

// Block-wide argmax of keys (the lowest index among equal maxima).
__device__ void block_argmax(float best, int idx, int32_t* out) {
  __shared__ float bv[1024];
  __shared__ int bi[1024];
  bv[threadIdx.x] = best, bi[threadIdx.x] = idx;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      const float ov = bv[threadIdx.x + stride];
      const int oi = bi[threadIdx.x + stride];
      if (ov > bv[threadIdx.x] || (ov == bv[threadIdx.x] && oi < bi[threadIdx.x])) bv[threadIdx.x] = ov, bi[threadIdx.x] = oi;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = bi[0];
}

// temperature <= 0: argmax of the logits; else Gumbel-max (backends/sample_impl.h).
__global__ void sample_kernel(int32_t* ids, const float* logits, int vocab, float inv_temp, uint64_t seed, bool greedy) {
  const int64_t r = blockIdx.x;
  const float* l = logits + r * vocab;
  float best = -INFINITY;
  int idx = vocab;  // loses every comparison
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float key = greedy ? l[i] : gumbel_key(l[i], inv_temp, seed, uint64_t(r), uint64_t(i));
    if (key > best || idx == vocab) best = key, idx = i;
  }
  block_argmax(best, idx, ids + r);
}

}  // namespace

void launch_rmsnorm(gpuStream_t s, float* y, const float* x, const float* w, int64_t rows, int dim, int64_t stride,
                    float eps) {
  if (rows <= 0) return;
  MX_LAUNCH(rmsnorm_kernel, dim3(unsigned(rows)), dim3(kBlock), 0, s, y, x, w, dim, stride, eps);
  MX_GPU_LAUNCHED("rmsnorm_kernel");
}
void launch_copy_rows(gpuStream_t s, float* dst, int64_t ds, const float* src, int64_t ss, int64_t rows,
                      int64_t width) {
  if (rows <= 0 || width <= 0) return;
  for (int64_t r0 = 0; r0 < rows; r0 += 65535) {  // grid.x limit
    const int64_t n = std::min<int64_t>(rows - r0, 65535);
    MX_LAUNCH(copy_rows_kernel, dim3(unsigned(n)), dim3(kBlock), 0, s, dst + r0 * ds, ds, src + r0 * ss, ss, width);
  }
  MX_GPU_LAUNCHED("copy_rows_kernel");
}
void launch_add_bias(gpuStream_t s, float* x, const float* b, int64_t rows, int dim) {
  if (rows * dim <= 0) return;
  MX_LAUNCH(add_bias_kernel, dim3(blocks_for(rows * dim)), dim3(kBlock), 0, s, x, b, rows * dim, dim);
  MX_GPU_LAUNCHED("add_bias_kernel");
}
void launch_silu_mul(gpuStream_t s, float* y, const float* g, const float* u, int64_t n) {
  if (n <= 0) return;
  MX_LAUNCH(silu_mul_kernel, dim3(blocks_for(n)), dim3(kBlock), 0, s, y, g, u, n);
  MX_GPU_LAUNCHED("silu_mul_kernel");
}
void launch_add(gpuStream_t s, float* x, const float* y, int64_t n) {
  if (n <= 0) return;
  MX_LAUNCH(add_kernel, dim3(blocks_for(n)), dim3(kBlock), 0, s, x, y, n);
  MX_GPU_LAUNCHED("add_kernel");
}
void launch_fill_uniform(gpuStream_t s, void* dst, DType dtype, size_t rows, size_t cols, size_t stride,
                         uint64_t first, float lo, float hi, uint64_t seed) {
  const int code = fill_code(dtype);
  if (code < 0) throw std::runtime_error("gpu fill_uniform: unsupported dtype");
  const int64_t n = int64_t(rows * cols);
  if (n == 0) return;
  MX_LAUNCH(fill_kernel, dim3(blocks_for(n)), dim3(kBlock), 0, s, dst, code, n, uint64_t(cols), uint64_t(stride),
            first, lo, hi, seed);
  MX_GPU_LAUNCHED("fill_kernel");
}
void launch_embed(gpuStream_t s, float* x, const DevWeight& table, const int32_t* ids, int64_t T) {
  if (T <= 0) return;
  if (table.dtype == DType::BF16)
    MX_LAUNCH((embed_kernel<true>), dim3(unsigned(T)), dim3(kBlock), 0, s, x, table.data, ids, table.out, table.in);
  else if (table.dtype == DType::F32)
    MX_LAUNCH((embed_kernel<false>), dim3(unsigned(T)), dim3(kBlock), 0, s, x, table.data, ids, table.out, table.in);
  else
    throw std::runtime_error("gpu embed: the table must be F32 or BF16");
  MX_GPU_LAUNCHED("embed_kernel");
}
void launch_rope(gpuStream_t s, float* x, const int32_t* pos, int64_t T, int n_heads, int token_stride,
                 int head_stride, const RopeArgs& r) {
  const int64_t n = T * n_heads * (r.rotary_dim / 2);
  if (n <= 0) return;
  MX_LAUNCH(rope_kernel, dim3(blocks_for(n)), dim3(kBlock), 0, s, x, pos, T, n_heads, token_stride, head_stride, r);
  MX_GPU_LAUNCHED("rope_kernel");
}
void launch_argmax(gpuStream_t s, int32_t* ids, const float* logits, int64_t rows, int vocab) {
  if (rows <= 0) return;
  MX_LAUNCH(sample_kernel, dim3(unsigned(rows)), dim3(kBlock), 0, s, ids, logits, vocab, 1.0f, uint64_t(0), true);
  MX_GPU_LAUNCHED("sample_kernel");
}
void launch_sample(gpuStream_t s, int32_t* ids, const float* logits, int64_t rows, int vocab, float temperature,
                   uint64_t seed) {
  if (rows <= 0) return;
  MX_LAUNCH(sample_kernel, dim3(unsigned(rows)), dim3(kBlock), 0, s, ids, logits, vocab, 1.0f / temperature, seed,
            false);
  MX_GPU_LAUNCHED("sample_kernel");
}

}  // namespace MX_GPU_NS
}  // namespace mx
