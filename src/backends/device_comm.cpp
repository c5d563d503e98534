// Which GPU build's NCCL / RCCL a backend takes (backends/device_comm.h).
#include "backends/device_comm.h"

#include "core/error.h"
#include "backends/backend.h"
#include "backends/gpu/gpu_backend.h"

namespace mx {

namespace {
// "cuda" or "hip" from a backend's name ("cuda:0 NVIDIA H200 (sm_90)"), else "".
std::string kind_of(const Backend& b) {
  const std::string n = b.name();
  for (const char* k : {"cuda", "hip"})
    if (n.rfind(k, 0) == 0) return k;
  return "";
}
[[noreturn]] void none(const Backend& b) {
  fail("backend {} has no device communicator (NCCL / RCCL run on CUDA / HIP GPUs): use --comm mpi or local "
       "(host-staged collectives)",
       b.name());
}
}  // namespace

std::string device_comm_id(Backend& b) {
  [[maybe_unused]] const std::string k = kind_of(b);  // unused in a build without GPU backends
  try {
#ifdef MXSERVE_HAVE_CUDA
    if (k == "cuda") return gpu_cuda::nccl_unique_id();
#endif
#ifdef MXSERVE_HAVE_HIP
    if (k == "hip") return gpu_hip::nccl_unique_id();
#endif
  } catch (const std::runtime_error& e) {
    fail("{}", e.what());
  }
  none(b);
}

std::unique_ptr<DeviceComm> make_device_comm(Backend& b, const std::string& id, int rank, int size) {
  [[maybe_unused]] const std::string k = kind_of(b);  // unused in a build without GPU backends
  try {
#ifdef MXSERVE_HAVE_CUDA
    if (k == "cuda") return gpu_cuda::make_nccl_comm(b, id, rank, size);
#endif
#ifdef MXSERVE_HAVE_HIP
    if (k == "hip") return gpu_hip::make_nccl_comm(b, id, rank, size);
#endif
  } catch (const std::runtime_error& e) {
    fail("{}", e.what());
  }
  none(b);
}

std::string device_comm_support() {
  std::string s;
#ifdef MXSERVE_HAVE_CUDA
  s += std::string("cuda: ") + gpu_cuda::nccl_compiled();
#endif
#ifdef MXSERVE_HAVE_HIP
  s += std::string(s.empty() ? "" : "; ") + "hip: " + gpu_hip::nccl_compiled();
#endif
  return s.empty() ? "no GPU backend compiled" : s;
}

}  // namespace mx
