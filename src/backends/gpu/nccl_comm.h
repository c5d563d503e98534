#pragma once
// The NCCL / RCCL communicator of the GPU backend (backends/device_comm.h),
// between gpu_backend.cu (which owns the stream) and nccl_comm.cu.
#include <memory>
#include <string>

#include "backends/device_comm.h"
#include "backends/gpu/gpu_port.h"

namespace mx {
namespace MX_GPU_NS {

// What was compiled: "nccl: compiled (libnccl.so.2 loaded at run time)" or why not.
const char* nccl_compiled();
std::string nccl_unique_id();
// Collectives run on comm_stream after the compute stream's work enqueued
// before each call, and the compute stream's later work waits for them (events).
std::unique_ptr<DeviceComm> make_nccl_comm_on(gpuStream_t compute, gpuStream_t comm_stream, int device,
                                              const std::string& id, int rank, int size);

}  // namespace MX_GPU_NS
}  // namespace mx
