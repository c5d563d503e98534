#pragma once
// Device-side weight decoding and the launchers of the GPU kernels (one .cu
// file per group: matmul.cu, attention.cu, ops.cu, moe.cu). gpu_backend.cu
// calls the launchers; everything runs on the backend's stream.
#include "backends/backend.h"
#include "backends/gpu/gpu_port.h"

namespace mx {
namespace MX_GPU_NS {

// Weight formats the kernels decode in registers (backends/cpu/matmul.h).
enum class WFmt { F32, BF16, MXFP4, FP8 };

// One [out, in] weight matrix as the kernels see it.
struct WView {
  const void* data;
  const void* scales;  // MXFP4: uint8 E8M0 [out, in/32]; FP8: f32 [ceil(out/128), scale_cols] or null
  int64_t out, in, scale_cols;
};

MX_DEVFN float bf16_bits_to_f32(uint32_t h) { return mx_bits_to_float(h << 16); }

// OCP E2M1 code -> value.
MX_DEVFN float e2m1(uint32_t c) {
  const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = mag[c & 7];
  return (c & 8) ? -v : v;
}
// OCP E8M0 scale: 2^(e - 127); 0xff is NaN.
MX_DEVFN float e8m0(uint32_t e) {
  return e == 0xff ? mx_bits_to_float(0x7fc00000u) : ldexpf(1.0f, int(e) - 127);
}
// OCP FP8 E4M3 ("fn": no infinities, S.1111.111 is NaN).
MX_DEVFN float fp8e4m3(uint32_t b) { return from_e4m3(uint8_t(b)); }

// Weights W[row, i .. i+8) as f32; i % 8 == 0 and 8 <= in - i.
template <WFmt F>
MX_DEVFN void load8(const WView& w, int64_t row, int64_t i, float v[8]) {
  if constexpr (F == WFmt::F32) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(w.data) + row * w.in + i);
    const float4 a = p[0], b = p[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else if constexpr (F == WFmt::BF16) {
    const uint4 q = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(w.data) + row * w.in + i);
    const uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[2 * j] = bf16_bits_to_f32(u[j] & 0xffffu);
      v[2 * j + 1] = bf16_bits_to_f32(u[j] >> 16);
    }
  } else if constexpr (F == WFmt::MXFP4) {
    // Element 2j in the low nibble of byte j; one scale per 32 elements.
    const uint32_t q = *reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(w.data) + (row * w.in + i) / 2);
    const float s = e8m0(static_cast<const uint8_t*>(w.scales)[row * (w.in / 32) + i / 32]);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = e2m1((q >> (4 * j)) & 15) * s;
  } else {
    const uint2 q = *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(w.data) + row * w.in + i);
    const float s = w.scales ? static_cast<const float*>(w.scales)[(row / 128) * w.scale_cols + i / 128] : 1.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[j] = fp8e4m3((q.x >> (8 * j)) & 255) * s;
      v[4 + j] = fp8e4m3((q.y >> (8 * j)) & 255) * s;
    }
  }
}

// One weight W[row, i] as f32 (the tail of a row whose length is not a multiple of 8).
template <WFmt F>
MX_DEVFN float load1(const WView& w, int64_t row, int64_t i) {
  if constexpr (F == WFmt::F32) return static_cast<const float*>(w.data)[row * w.in + i];
  else if constexpr (F == WFmt::BF16) return bf16_bits_to_f32(static_cast<const uint16_t*>(w.data)[row * w.in + i]);
  else if constexpr (F == WFmt::MXFP4) {
    const int64_t e = row * w.in + i;
    const uint32_t b = static_cast<const uint8_t*>(w.data)[e / 2];
    return e2m1((e & 1) ? b >> 4 : b & 15) * e8m0(static_cast<const uint8_t*>(w.scales)[row * (w.in / 32) + i / 32]);
  } else {
    const float s = w.scales ? static_cast<const float*>(w.scales)[(row / 128) * w.scale_cols + i / 128] : 1.0f;
    return fp8e4m3(static_cast<const uint8_t*>(w.data)[row * w.in + i]) * s;
  }
}

// Lane-partial dot products of weight row r with up to NT activation rows:
// acc[t] += sum over this lane's elements of W[r, i] * xr[t][i], for t < nt.
// vec: the 8-wide path (in % 8 == 0 and every xr[t] 16-byte aligned). The
// caller warp_sums each acc[t] (every lane must take part).
template <WFmt F, int NT>
MX_DEVFN void row_dot_partial(const WView& w, int64_t r, const float* const* xr, int nt,
                                                bool vec, float* acc) {
  const int lane = threadIdx.x % MX_WARP;
  if (vec) {
    for (int64_t i = int64_t(lane) * 8; i < w.in; i += MX_WARP * 8) {
      float v[8];
      load8<F>(w, r, i, v);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t < nt) {
          const float4* xp = reinterpret_cast<const float4*>(xr[t] + i);
          const float4 a = xp[0], b = xp[1];
          acc[t] += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * b.x + v[5] * b.y + v[6] * b.z +
                    v[7] * b.w;
        }
      }
    }
  } else {
    for (int64_t i = lane; i < w.in; i += MX_WARP) {
      const float wv = load1<F>(w, r, i);
#pragma unroll
      for (int t = 0; t < NT; ++t)
        if (t < nt) acc[t] += wv * xr[t][i];
    }
  }
}

// A stack of experts' matrices: expert e's view, on the device.
struct WStack {
  WView base;
  size_t data_stride, scale_stride;  // bytes between experts
  MX_DEVFN WView at(int e) const {
    WView v = base;
    v.data = static_cast<const char*>(base.data) + size_t(e) * data_stride;
    if (base.scales) v.scales = static_cast<const char*>(base.scales) + size_t(e) * scale_stride;
    return v;
  }
};

WFmt wfmt_of(DType t);  // throws for dtypes the kernels do not take
WView view_of(const DevWeight& w, int expert);  // host side
WStack stack_of(const DevWeight& w);

// ---- launchers (matmul.cu) ----
// y[t, o] = x[t] . W[o] for t < T. rows_per_block / token_tile from the registry.
void launch_matmul(gpuStream_t s, float* y, const float* x, const DevWeight& w, int64_t T,
                   const KernelConfig& cfg);

// ---- attention.cu ----
void launch_kv_write(gpuStream_t s, const PagedKV& kv, const float* k, int k_stride, const float* v,
                     int v_stride, const int32_t* slots, int64_t T);
void launch_paged_attention(gpuStream_t s, float* out, const float* q, int q_stride, const PagedKV& kv,
                            const AttnArgs& a, const int32_t* block_tables, int max_blocks,
                            const int32_t* seq, const int32_t* pos, int64_t T);
void launch_prefill_attention(gpuStream_t s, float* out, const float* q, int q_stride, const PagedKV& kv,
                              const AttnArgs& a, const int32_t* block_table, int start_pos, int64_t n_q);

// ---- ops.cu ----
void launch_rmsnorm(gpuStream_t s, float* y, const float* x, const float* w, int64_t rows, int dim, int64_t stride,
                    float eps);
void launch_copy_rows(gpuStream_t s, float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                      int64_t rows, int64_t width);
void launch_add_bias(gpuStream_t s, float* x, const float* b, int64_t rows, int dim);
void launch_silu_mul(gpuStream_t s, float* y, const float* g, const float* u, int64_t n);
void launch_add(gpuStream_t s, float* x, const float* y, int64_t n);
void launch_embed(gpuStream_t s, float* x, const DevWeight& table, const int32_t* ids, int64_t T);
void launch_rope(gpuStream_t s, float* x, const int32_t* pos, int64_t T, int n_heads, int token_stride,
                 int head_stride, const RopeArgs& r);
void launch_fill_uniform(gpuStream_t s, void* dst, DType dtype, size_t rows, size_t cols, size_t stride,
                         uint64_t first, float lo, float hi, uint64_t seed);
void launch_argmax(gpuStream_t s, int32_t* ids, const float* logits, int64_t rows, int vocab);
void launch_sample(gpuStream_t s, int32_t* ids, const float* logits, int64_t rows, int vocab,
                   float temperature, uint64_t seed);

// ---- moe.cu ----
void launch_moe_route(gpuStream_t s, int32_t* ids, float* w, const float* logits, int64_t T, const RouteArgs& r);
// Workspace bytes moe_ffn needs for T tokens (caller allocates, device memory).
size_t moe_workspace_bytes(int64_t T, int k, int E, int64_t D, int64_t H);
void launch_moe_ffn(gpuStream_t s, void* workspace, float* out, const float* x, const int32_t* ids,
                    const float* weights, int64_t T, int k, const DevWeight& gate, const DevWeight& up,
                    const DevWeight& down);

}  // namespace MX_GPU_NS
}  // namespace mx
