#pragma once
// Entry points of the GPU backend. One source (backends/gpu/*.cu) is compiled
// twice, by nvcc as CUDA into namespace gpu_cuda and by hipcc as HIP into
// namespace gpu_hip (MX_GPU_NS in gpu_port.h), so one binary may hold both.
#include <memory>

#include "backends/backend.h"
#include "backends/device_comm.h"

namespace mx {
namespace gpu_cuda {
int device_count();  // 0 without a device or driver; never throws
std::unique_ptr<Backend> make_backend(int device);
// NCCL (gpu_cuda) / RCCL (gpu_hip), backends/gpu/nccl_comm.cu: what was compiled,
// rank 0's unique id, and a member on backend b (one of this namespace's).
const char* nccl_compiled();
std::string nccl_unique_id();
std::unique_ptr<DeviceComm> make_nccl_comm(Backend& b, const std::string& id, int rank, int size);
}  // namespace gpu_cuda
namespace gpu_hip {
int device_count();
std::unique_ptr<Backend> make_backend(int device);
// NCCL (gpu_cuda) / RCCL (gpu_hip), backends/gpu/nccl_comm.cu: what was compiled,
// rank 0's unique id, and a member on backend b (one of this namespace's).
const char* nccl_compiled();
std::string nccl_unique_id();
std::unique_ptr<DeviceComm> make_nccl_comm(Backend& b, const std::string& id, int rank, int size);
}  // namespace gpu_hip
}  // namespace mx
