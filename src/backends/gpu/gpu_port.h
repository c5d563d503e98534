#pragma once
// The portability layer of the GPU backend: the kernels in backends/gpu/*.cu are
// written once against these names and compiled by nvcc (CUDA) or hipcc (HIP).
// Every difference between the two lives here, each with both sides:
//   runtime API      gpuMalloc/gpuMemcpy/... -> cuda* or hip*
//   warp size        MX_WARP: 32 on NVIDIA; on AMD the wavefront the target
//                    compiles for (64 on gfx9 CDNA, 32 on gfx10+ RDNA wave32)
//   shuffles         mx_shfl_xor: __shfl_xor_sync with a full mask (CUDA), __shfl_xor (HIP)
//   async copies     mx_cp_async16 / mx_cp_async_wait: cp.async on sm_80+, a
//                    plain 16-byte load/store elsewhere (HIP, older CUDA)
//   shared memory    kMaxSmemStatic: the static limit every target allows (48 KiB;
//                    AMD LDS is 64 KiB, so the common bound is NVIDIA's)
//   atomics          atomicAdd on int / float exists on both with the same meaning
//   graphs           MX_GPU_GRAPHS and gpuGraph*: stream capture, instantiate,
//                    launch (CUDA and ROCm HIP; not HIP-CPU, which has none)
// Nothing CUDA-only is called outside this file without a guard.
#include <cstdint>
#include <stdexcept>
#include <string>

// MX_GPU_HIP_CPU: HIP's CPU runtime (ROCm/HIP-CPU, header-only), a way to run
// the HIP build of these kernels on a machine with no GPU; not part of the build.
#if defined(__HIPCC__) || defined(MX_GPU_HIP_CPU)
#include <hip/hip_runtime.h>
#define MX_GPU_HIP 1
#define MX_GPU_NS gpu_hip
#define gpuError_t hipError_t
#define gpuSuccess hipSuccess
#define gpuGetErrorString hipGetErrorString
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuSetDevice hipSetDevice
#define gpuDeviceProp hipDeviceProp_t
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuStream_t hipStream_t
#define gpuStreamCreate hipStreamCreate
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuGetLastError hipGetLastError
#define gpuEvent_t hipEvent_t
#define gpuEventCreate hipEventCreate
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuEventDestroy hipEventDestroy
#define gpuEventCreateWithFlags hipEventCreateWithFlags
#define gpuEventDisableTiming hipEventDisableTiming
#define gpuStreamWaitEvent hipStreamWaitEvent
#if !defined(MX_GPU_HIP_CPU)  // HIP-CPU has no graph API
#define MX_GPU_GRAPHS 1
#define gpuGraph_t hipGraph_t
#define gpuGraphExec_t hipGraphExec_t
#define gpuStreamBeginCapture hipStreamBeginCapture
#define gpuStreamEndCapture hipStreamEndCapture
#define gpuStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define gpuGraphInstantiateWithFlags hipGraphInstantiateWithFlags
#define gpuGraphLaunch hipGraphLaunch
#define gpuGraphDestroy hipGraphDestroy
#define gpuGraphExecDestroy hipGraphExecDestroy
#endif
#define MX_LAUNCH(kernel, grid, block, smem, stream, ...) \
  hipLaunchKernelGGL(kernel, grid, block, smem, stream, __VA_ARGS__)
#else
#include <cuda_runtime.h>
#define MX_GPU_CUDA 1
#define MX_GPU_NS gpu_cuda
#define gpuError_t cudaError_t
#define gpuSuccess cudaSuccess
#define gpuGetErrorString cudaGetErrorString
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuSetDevice cudaSetDevice
#define gpuDeviceProp cudaDeviceProp
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuStream_t cudaStream_t
#define gpuStreamCreate cudaStreamCreate
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuGetLastError cudaGetLastError
#define gpuEvent_t cudaEvent_t
#define gpuEventCreate cudaEventCreate
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuEventDestroy cudaEventDestroy
#define gpuEventCreateWithFlags cudaEventCreateWithFlags
#define gpuEventDisableTiming cudaEventDisableTiming
#define gpuStreamWaitEvent cudaStreamWaitEvent
#define MX_GPU_GRAPHS 1
#define gpuGraph_t cudaGraph_t
#define gpuGraphExec_t cudaGraphExec_t
#define gpuStreamBeginCapture cudaStreamBeginCapture
#define gpuStreamEndCapture cudaStreamEndCapture
#define gpuStreamCaptureModeThreadLocal cudaStreamCaptureModeThreadLocal
#define gpuGraphInstantiateWithFlags cudaGraphInstantiateWithFlags
#define gpuGraphLaunch cudaGraphLaunch
#define gpuGraphDestroy cudaGraphDestroy
#define gpuGraphExecDestroy cudaGraphExecDestroy
#define MX_LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#endif
// Kernel launches go through MX_LAUNCH (HIP's launch macro takes what CUDA's
// <<<>>> takes); a template kernel is named in parentheses: MX_LAUNCH((k<4>), ...).

// Warp (wavefront) width of the code being compiled. Host code must not use it:
// kernels are launched with block sizes that are multiples of 64, which every
// target divides into whole warps.
#if defined(MX_GPU_HIP)
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define MX_WARP __AMDGCN_WAVEFRONT_SIZE
#else
#define MX_WARP 64
#endif
#else
#define MX_WARP 32
#endif

// Device helper functions (inline: every .cu includes them).
#if defined(MX_GPU_HIP_CPU)
#define MX_DEVFN inline
#else
#define MX_DEVFN __device__ __forceinline__
#endif

namespace mx {
namespace MX_GPU_NS {

constexpr int kMaxSmemStatic = 48 * 1024;
constexpr int kBlock = 256;  // the default block size: 8 warps of 32 or 4 wavefronts of 64

inline void check(gpuError_t e, const char* what) {
  if (e != gpuSuccess) throw std::runtime_error(std::string(what) + ": " + gpuGetErrorString(e));
}
#define MX_GPU_CHECK(call) ::mx::MX_GPU_NS::check((call), #call)
// After a kernel launch: launch errors (bad configuration, no kernel image for the device).
#define MX_GPU_LAUNCHED(name) ::mx::MX_GPU_NS::check(gpuGetLastError(), name)

template <class T>  // float or int
MX_DEVFN T mx_shfl_xor(T v, int lane_mask) {
#if defined(MX_GPU_HIP)
  return __shfl_xor(v, lane_mask);
#else
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
#endif
}

// The float with these bits (__uint_as_float on the devices).
MX_DEVFN float mx_bits_to_float(uint32_t u) {
#if defined(MX_GPU_HIP_CPU)
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
#else
  return __uint_as_float(u);
#endif
}

// Sum / max over the warp; every lane gets the result.
MX_DEVFN float warp_sum(float v) {
#pragma unroll
  for (int o = MX_WARP / 2; o > 0; o >>= 1) v += mx_shfl_xor(v, o);
  return v;
}
MX_DEVFN float warp_max(float v) {
#pragma unroll
  for (int o = MX_WARP / 2; o > 0; o >>= 1) v = fmaxf(v, mx_shfl_xor(v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of MX_WARP, at most 1024); every
// thread gets the result. red: __shared__ float[32].
MX_DEVFN float block_sum(float v, float* red) {
  const int lane = threadIdx.x % MX_WARP, wid = threadIdx.x / MX_WARP, nw = blockDim.x / MX_WARP;
  v = warp_sum(v);
  __syncthreads();  // red may still be read by a previous call
  if (lane == 0) red[wid] = v;
  __syncthreads();
  float s = 0;
  for (int i = 0; i < nw; ++i) s += red[i];  // fixed order: the same bits on every thread
  return s;
}

// 16-byte global -> shared copy, asynchronous where the hardware has it.
MX_DEVFN void mx_cp_async16(void* smem, const void* gmem) {
#if defined(MX_GPU_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
#else
  *static_cast<uint4*>(smem) = *static_cast<const uint4*>(gmem);
#endif
}
// Waits for this thread's outstanding async copies (the caller then __syncthreads).
MX_DEVFN void mx_cp_async_wait() {
#if defined(MX_GPU_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::);
#endif
}

}  // namespace MX_GPU_NS
}  // namespace mx
