// Attention over the paged KV cache (backends/backend.h PagedKV): f32 math over
// an f32, bf16 or fp8 cache (prefill: f32 only).
//   decode: one block per (query token, head); its warps take the context
//     positions round-robin, each keeping an online softmax (running max, sum
//     and weighted V) over its positions, merged across warps at the end;
//   prefill: flash attention, a block per (16 queries, head): K/V tiles of 32
//     positions are staged in shared memory (cp.async on sm_80+), scores,
//     online softmax and the output accumulate tile by tile, causal mask on
//     the absolute positions.
#include "backends/gpu/gpu_kernels.h"

namespace mx {
namespace MX_GPU_NS {
namespace {

constexpr int kMaxHeadDim = 256;

MX_DEVFN int64_t slot_of(const int32_t* table, int block_size, int p) {
  return int64_t(table[p / block_size]) * block_size + p % block_size;
}

__global__ void kv_write_kernel(PagedKV kv, const float* k, int k_stride, const float* v, int v_stride,
                                const int32_t* slots) {
  const int64_t t = blockIdx.x, s = slots[t];
  for (int i = threadIdx.x; i < kv.k_width; i += blockDim.x)
    kv_store(kv.k, kv.dtype, s * kv.k_width + i, k[t * k_stride + i]);
  for (int i = threadIdx.x; i < kv.v_width; i += blockDim.x)
    kv_store(kv.v, kv.dtype, s * kv.v_width + i, v[t * v_stride + i]);
}

constexpr int kDecodeThreads = 128;
// Decode handles MLA's latent heads too (DeepSeek-V3: 512 + 64 key floats).
constexpr int kMaxDecodeDim = 640;
constexpr int kDimsPerLane = kMaxDecodeDim / 32;  // the most a lane holds (warp of 32)

__global__ void decode_kernel(float* out, const float* q, int q_stride, PagedKV kv, AttnArgs a,
                              const int32_t* block_tables, int max_blocks, const int32_t* seq,
                              const int32_t* pos) {
  constexpr int kWarps = kDecodeThreads / MX_WARP;
  __shared__ float qs[kMaxDecodeDim];
  __shared__ float wm[kWarps], wl[kWarps];
  __shared__ float wacc[kWarps][kMaxDecodeDim];
  const int h = blockIdx.x, t = blockIdx.y, D = a.head_dim, Dv = a.v_dim ? a.v_dim : a.head_dim;
  const int lane = threadIdx.x % MX_WARP, wid = threadIdx.x / MX_WARP;
  const int g = h / (a.n_heads / a.n_kv_heads), n_ctx = pos[t] + 1;
  const int32_t* table = block_tables + int64_t(seq[t]) * max_blocks;
  for (int d = threadIdx.x; d < D; d += blockDim.x) qs[d] = q[int64_t(t) * q_stride + h * D + d] * a.scale;
  __syncthreads();
  float m = -INFINITY, l = 0.0f, acc[kDimsPerLane];
#pragma unroll
  for (int j = 0; j < kDimsPerLane; ++j) acc[j] = 0.0f;
  // Every warp runs the same number of iterations (inactive ones skip the math
  // but still take part in the shuffles): warp-synchronous code stays uniform
  // per block, which emulators with block-wide shuffle barriers need too.
  const int rounds = (n_ctx + kWarps - 1) / kWarps;
  for (int it = 0; it < rounds; ++it) {
    const int p = wid + it * kWarps;
    const bool active = p < n_ctx;
    const int64_t sl = active ? slot_of(table, kv.block_size, p) : 0;
    const int64_t kp = sl * kv.k_width + g * D;  // element offsets into kv.k / the value base
    const void* vbase = a.values_in_k ? kv.k : kv.v;
    const int64_t vp = a.values_in_k ? sl * kv.k_width + g * Dv : sl * kv.v_width + g * Dv;
    float dot = 0.0f;
    if (active)
      for (int d = lane; d < D; d += MX_WARP) dot += qs[d] * kv_load(kv.k, kv.dtype, kp + d);
    const float sc = warp_sum(dot);
    if (!active) continue;
    const float m_new = fmaxf(m, sc), alpha = expf(m - m_new), pw = expf(sc - m_new);
    l = l * alpha + pw;
#pragma unroll
    for (int j = 0; j < kDimsPerLane; ++j) {
      const int d = lane + j * MX_WARP;
      if (d < Dv) acc[j] = acc[j] * alpha + pw * kv_load(vbase, kv.dtype, vp + d);
    }
    m = m_new;
  }
  if (lane == 0) wm[wid] = m, wl[wid] = l;
#pragma unroll
  for (int j = 0; j < kDimsPerLane; ++j) {
    const int d = lane + j * MX_WARP;
    if (d < Dv) wacc[wid][d] = acc[j];
  }
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, wm[w]);
  for (int d = threadIdx.x; d < Dv; d += blockDim.x) {
    float L = 0.0f, o = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      if (wm[w] == -INFINITY) continue;  // a warp that saw no position
      const float f = expf(wm[w] - M);
      L += wl[w] * f;
      o += wacc[w][d] * f;
    }
    out[(int64_t(t) * a.n_heads + h) * Dv + d] = o / L;
  }
}

// Flash prefill: BR queries x BC keys per step, head dims up to DMAX.
template <int DMAX, int BR, int BC>
__global__ void flash_kernel(float* out, const float* q, int q_stride, PagedKV kv, AttnArgs a,
                             const int32_t* table, int start_pos, int n_q) {
  constexpr int kThreads = 128;
  static_assert((BR * DMAX + 2 * BC * DMAX + BR * BC + 3 * BR) * 4 <= kMaxSmemStatic, "flash tile too big");
  __shared__ float qs[BR][DMAX] __attribute__((aligned(16)));
  __shared__ float ks[BC][DMAX] __attribute__((aligned(16)));
  __shared__ float vs[BC][DMAX] __attribute__((aligned(16)));
  __shared__ float ss[BR][BC];
  __shared__ float rm[BR], rl[BR], ralpha[BR];
  const int D = a.head_dim, h = blockIdx.y, q0 = blockIdx.x * BR, tid = threadIdx.x;
  const int g = h / (a.n_heads / a.n_kv_heads);
  const int nr = n_q - q0 < BR ? n_q - q0 : BR;  // query rows of this tile
  for (int e = tid; e < BR * D; e += kThreads) {
    const int r = e / D, d = e % D;
    qs[r][d] = r < nr ? q[int64_t(q0 + r) * q_stride + h * D + d] * a.scale : 0.0f;
  }
  if (tid < BR) rm[tid] = -INFINITY, rl[tid] = 0.0f;
  constexpr int kOut = BR * DMAX / kThreads;  // output entries a thread owns (e = tid + j * kThreads)
  float o[kOut];
#pragma unroll
  for (int j = 0; j < kOut; ++j) o[j] = 0.0f;
  const int last = start_pos + q0 + nr - 1;  // the last position any row attends to
  const int vec = D / 4;                     // 16-byte chunks per head vector
  for (int kb = 0; kb <= last; kb += BC) {
    __syncthreads();  // the previous tile's ks / vs / ss are consumed
    for (int e = tid; e < BC * vec; e += kThreads) {
      const int c = e / vec, d4 = (e % vec) * 4, p = kb + c;
      if (p <= last) {
        const int64_t sl = slot_of(table, kv.block_size, p);
        mx_cp_async16(&ks[c][d4], static_cast<const float*>(kv.k) + sl * kv.k_width + g * D + d4);
        mx_cp_async16(&vs[c][d4], static_cast<const float*>(kv.v) + sl * kv.v_width + g * D + d4);
      }
    }
    mx_cp_async_wait();
    __syncthreads();
    for (int e = tid; e < BR * BC; e += kThreads) {
      const int r = e / BC, c = e % BC, p = kb + c;
      float sc = -INFINITY;
      if (r < nr && p <= start_pos + q0 + r) {  // causal
        sc = 0.0f;
        for (int d = 0; d < D; ++d) sc += qs[r][d] * ks[c][d];
      }
      ss[r][c] = sc;
    }
    __syncthreads();
    if (tid < BR) {
      const int r = tid;
      float mx = rm[r];
      for (int c = 0; c < BC; ++c) mx = fmaxf(mx, ss[r][c]);
      const float alpha = mx == -INFINITY ? 1.0f : expf(rm[r] - mx);
      float sum = 0.0f;
      for (int c = 0; c < BC; ++c) {
        const float pw = mx == -INFINITY ? 0.0f : expf(ss[r][c] - mx);
        ss[r][c] = pw;
        sum += pw;
      }
      rl[r] = rl[r] * alpha + sum;
      rm[r] = mx;
      ralpha[r] = alpha;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kOut; ++j) {
      const int e = tid + j * kThreads, r = e / DMAX, d = e % DMAX;
      if (d >= D) continue;
      float acc = o[j] * ralpha[r];
      for (int c = 0; c < BC; ++c) {
        const float pw = ss[r][c];
        if (pw != 0.0f) acc += pw * vs[c][d];
      }
      o[j] = acc;
    }
  }
#pragma unroll
  for (int j = 0; j < kOut; ++j) {
    const int e = tid + j * kThreads, r = e / DMAX, d = e % DMAX;
    if (r < nr && d < D) out[(int64_t(q0 + r) * a.n_heads + h) * D + d] = o[j] / rl[r];
  }
}

void check_attn(const PagedKV& kv, const AttnArgs& a, int max_dim) {
  if (a.head_dim <= 0 || a.head_dim > max_dim || a.head_dim % 4 != 0 || a.vd() > a.head_dim)
    throw std::runtime_error("gpu attention: head_dim " + std::to_string(a.head_dim) +
                             " must be a multiple of 4 and at most " + std::to_string(max_dim) +
                             ", the value width at most head_dim");
  if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
    throw std::runtime_error("gpu attention: query heads must be a multiple of kv heads");
  if (kv.k_width % 4 != 0 || kv.v_width % 4 != 0)
    throw std::runtime_error("gpu attention: K/V slot widths must be multiples of 4 floats");
}

}  // namespace

void launch_kv_write(gpuStream_t s, const PagedKV& kv, const float* k, int k_stride, const float* v,
                     int v_stride, const int32_t* slots, int64_t T) {
  if (T <= 0) return;
  MX_LAUNCH(kv_write_kernel, dim3(unsigned(T)), dim3(kBlock), 0, s, kv, k, k_stride, v, v_stride, slots);
  MX_GPU_LAUNCHED("kv_write_kernel");
}

void launch_paged_attention(gpuStream_t s, float* out, const float* q, int q_stride, const PagedKV& kv,
                            const AttnArgs& a, const int32_t* block_tables, int max_blocks,
                            const int32_t* seq, const int32_t* pos, int64_t T) {
  if (T <= 0) return;
  check_attn(kv, a, kMaxDecodeDim);
  MX_LAUNCH(decode_kernel, dim3(unsigned(a.n_heads), unsigned(T)), dim3(kDecodeThreads), 0, s, out, q,
            q_stride, kv, a, block_tables, max_blocks, seq, pos);
  MX_GPU_LAUNCHED("decode_kernel");
}

void launch_prefill_attention(gpuStream_t s, float* out, const float* q, int q_stride, const PagedKV& kv,
                              const AttnArgs& a, const int32_t* block_table, int start_pos, int64_t n_q) {
  if (n_q <= 0) return;
  check_attn(kv, a, kMaxHeadDim);
  if (a.v_dim || a.values_in_k) throw std::runtime_error("gpu prefill_attention: GQA heads only (no v_dim / values_in_k)");
  if (kv.dtype != DType::F32) throw std::runtime_error("gpu prefill_attention: f32 KV cache only");
  if (reinterpret_cast<uintptr_t>(kv.k) % 16 || reinterpret_cast<uintptr_t>(kv.v) % 16)
    throw std::runtime_error("gpu attention: the KV cache must be 16-byte aligned");
  const unsigned heads = unsigned(a.n_heads);
  if (a.head_dim <= 64) {
    MX_LAUNCH((flash_kernel<64, 16, 32>), dim3(unsigned((n_q + 15) / 16), heads), dim3(128), 0, s, out, q,
              q_stride, kv, a, block_table, start_pos, int(n_q));
  } else if (a.head_dim <= 128) {
    MX_LAUNCH((flash_kernel<128, 16, 32>), dim3(unsigned((n_q + 15) / 16), heads), dim3(128), 0, s, out, q,
              q_stride, kv, a, block_table, start_pos, int(n_q));
  } else {
    MX_LAUNCH((flash_kernel<256, 8, 16>), dim3(unsigned((n_q + 7) / 8), heads), dim3(128), 0, s, out, q,
              q_stride, kv, a, block_table, start_pos, int(n_q));
  }
  MX_GPU_LAUNCHED("flash_kernel");
}

}  // namespace MX_GPU_NS
}  // namespace mx
