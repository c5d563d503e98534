// DeviceComm over NCCL (CUDA build) or RCCL (HIP build): backends/device_comm.h.
//
// Compiled only where the header is: <nccl.h> (CUDA toolkit or libnccl-dev) for
// nvcc, <rccl/rccl.h> (ROCm's librccl-dev) for hipcc; never for HIP-CPU (no
// device, no RCCL). Elsewhere the entry points throw a clear error and the host-
// staged communicators (comm/comm.h) remain.
//
// The library is opened at run time (dlopen of libnccl.so.2 / librccl.so.1, or
// the file MXSERVE_NCCL_LIBRARY names), not linked, as vLLM's pynccl wrapper
// does (vllm/distributed/device_communicators/pynccl_wrapper.py): the binary
// starts on machines without it, and only --comm nccl needs it. The header
// still supplies the types and signatures (decltype of each function).
//
// Calls follow the NCCL user guide (docs.nvidia.com/deeplearning/nccl,
// "Creating a communicator", "Point-to-point communication"): rank 0's
// ncclGetUniqueId, shared by the caller over MPI; ncclCommInitRank on each
// rank's device; collectives enqueued on the backend's comm stream, which waits
// (an event) for the compute stream's work enqueued before the call, while the
// compute stream's later work waits for the collective (another event): the
// NCCL guide's "CUDA Stream Semantics" leave that ordering to the caller, and
// the host never blocks on it (backends/backend.h comm_begin); the all-to-all
// as ncclSend/ncclRecv pairs inside ncclGroupStart/ncclGroupEnd (a rank may
// send to itself).
#include "backends/gpu/nccl_comm.h"

#include <cstring>
#include <stdexcept>

#if defined(MX_GPU_HIP_CPU)
#define MX_NCCL_WHY "not compiled (HIP-CPU has no device collectives)"
#elif defined(MX_GPU_HIP) && __has_include(<rccl/rccl.h>)
#include <rccl/rccl.h>
#define MX_HAVE_NCCL 1
#define MX_NCCL_NAME "rccl"
#define MX_NCCL_SONAME "librccl.so.1"
#elif defined(MX_GPU_HIP)
#define MX_NCCL_WHY "not compiled (rccl/rccl.h was not found when this was built)"
#elif __has_include(<nccl.h>)
#include <nccl.h>
#define MX_HAVE_NCCL 1
#define MX_NCCL_NAME "nccl"
#define MX_NCCL_SONAME "libnccl.so.2"
#else
#define MX_NCCL_WHY "not compiled (nccl.h was not found when this was built)"
#endif

#if defined(MX_HAVE_NCCL)
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <type_traits>
#endif

namespace mx {
namespace MX_GPU_NS {

#if defined(MX_HAVE_NCCL)
namespace {

// The NCCL entry points this file calls, resolved once from the shared library.
struct Nccl {
  decltype(&ncclGetVersion) GetVersion = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitRank) CommInitRank = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
  decltype(&ncclAllReduce) AllReduce = nullptr;
  decltype(&ncclAllGather) AllGather = nullptr;
  decltype(&ncclSend) Send = nullptr;
  decltype(&ncclRecv) Recv = nullptr;
  decltype(&ncclGroupStart) GroupStart = nullptr;
  decltype(&ncclGroupEnd) GroupEnd = nullptr;
  int version = 0;
};

const Nccl& nccl() {
  static Nccl lib;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("MXSERVE_NCCL_LIBRARY");
    const char* file = env && *env ? env : MX_NCCL_SONAME;
    void* h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      error = std::string(MX_NCCL_NAME ": cannot open ") + file + " (" + dlerror() +
              "); install it or set MXSERVE_NCCL_LIBRARY, or use --comm mpi (host-staged)";
      return;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (!fn && error.empty()) error = std::string(MX_NCCL_NAME ": ") + file + " has no " + name;
    };
    sym(lib.GetVersion, "ncclGetVersion");
    sym(lib.GetErrorString, "ncclGetErrorString");
    sym(lib.GetUniqueId, "ncclGetUniqueId");
    sym(lib.CommInitRank, "ncclCommInitRank");
    sym(lib.CommDestroy, "ncclCommDestroy");
    sym(lib.AllReduce, "ncclAllReduce");
    sym(lib.AllGather, "ncclAllGather");
    sym(lib.Send, "ncclSend");
    sym(lib.Recv, "ncclRecv");
    sym(lib.GroupStart, "ncclGroupStart");
    sym(lib.GroupEnd, "ncclGroupEnd");
    if (error.empty()) lib.GetVersion(&lib.version);
  });
  if (!error.empty()) throw std::runtime_error(error);
  return lib;
}

void check(const Nccl& L, ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string(MX_NCCL_NAME " ") + what + ": " + L.GetErrorString(r));
}

class NcclComm final : public DeviceComm {
 public:
  NcclComm(gpuStream_t compute, gpuStream_t stream, int device, const std::string& id, int rank, int size)
      : L_(nccl()), compute_(compute), stream_(stream), rank_(rank), size_(size) {
    ncclUniqueId uid;
    if (id.size() != sizeof uid)
      throw std::runtime_error(std::string(MX_NCCL_NAME ": a unique id of ") + std::to_string(id.size()) +
                               " bytes, expected " + std::to_string(sizeof uid));
    if (size < 1 || rank < 0 || rank >= size) throw std::runtime_error(MX_NCCL_NAME ": bad rank / size");
    std::memcpy(&uid, id.data(), sizeof uid);
    MX_GPU_CHECK(gpuSetDevice(device));  // the communicator binds to the current device
    check(L_, L_.CommInitRank(&comm_, size, uid, rank), "ncclCommInitRank");
    MX_GPU_CHECK(gpuEventCreateWithFlags(&ready_, gpuEventDisableTiming));
    MX_GPU_CHECK(gpuEventCreateWithFlags(&done_, gpuEventDisableTiming));
  }
  ~NcclComm() override {
    (void)gpuStreamSynchronize(stream_);
    if (comm_) (void)L_.CommDestroy(comm_);
    (void)gpuEventDestroy(ready_);
    (void)gpuEventDestroy(done_);
  }
  std::string name() const override {
    const int v = L_.version;  // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z since 2.9
    return std::string(MX_NCCL_NAME " ") + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
           std::to_string(v % 100);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce_sum(float* data, size_t n) override {
    if (!n) return;
    Ordered o(*this);
    check(L_, L_.AllReduce(data, data, n, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce");
  }
  void allgather(const void* send, size_t bytes, void* recv) override {
    if (!bytes) return;
    Ordered o(*this);
    check(L_, L_.AllGather(send, recv, bytes, ncclUint8, comm_, stream_), "ncclAllGather");
  }
  void alltoallv(const void* send, const size_t* sb, const size_t* so, void* recv, const size_t* rb,
                 const size_t* ro) override {
    Ordered o(*this);
    check(L_, L_.GroupStart(), "ncclGroupStart");
    ncclResult_t r = ncclSuccess;
    for (int p = 0; p < size_ && r == ncclSuccess; ++p) {
      if (sb[p]) r = L_.Send(static_cast<const char*>(send) + so[p], sb[p], ncclUint8, p, comm_, stream_);
      if (r == ncclSuccess && rb[p])
        r = L_.Recv(static_cast<char*>(recv) + ro[p], rb[p], ncclUint8, p, comm_, stream_);
    }
    const ncclResult_t end = L_.GroupEnd();  // always close the group, then report the first error
    check(L_, r, "ncclSend/ncclRecv");
    check(L_, end, "ncclGroupEnd");
  }

 private:
  // One collective's ordering: the comm stream waits for the compute stream's
  // work so far (its inputs), and the compute stream's next work waits for
  // the collective (its outputs), also when the enqueue threw.
  struct Ordered {
    NcclComm& c;
    explicit Ordered(NcclComm& comm) : c(comm) {
      MX_GPU_CHECK(gpuEventRecord(c.ready_, c.compute_));
      MX_GPU_CHECK(gpuStreamWaitEvent(c.stream_, c.ready_, 0));
    }
    ~Ordered() {
      (void)gpuEventRecord(c.done_, c.stream_);
      (void)gpuStreamWaitEvent(c.compute_, c.done_, 0);
    }
  };
  const Nccl& L_;
  gpuStream_t compute_, stream_;  // the backend's compute stream; the comm stream collectives run on
  gpuEvent_t ready_{}, done_{};
  int rank_, size_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

const char* nccl_compiled() { return MX_NCCL_NAME ": compiled (" MX_NCCL_SONAME " is opened at run time)"; }

std::string nccl_unique_id() {
  const Nccl& L = nccl();
  ncclUniqueId uid;
  check(L, L.GetUniqueId(&uid), "ncclGetUniqueId");
  return std::string(reinterpret_cast<const char*>(&uid), sizeof uid);
}

std::unique_ptr<DeviceComm> make_nccl_comm_on(gpuStream_t compute, gpuStream_t comm_stream, int device,
                                              const std::string& id, int rank, int size) {
  return std::make_unique<NcclComm>(compute, comm_stream, device, id, rank, size);
}

#else  // no NCCL / RCCL in this build

#if defined(MX_GPU_HIP)
#define MX_NCCL_LABEL "rccl"
#else
#define MX_NCCL_LABEL "nccl"
#endif

const char* nccl_compiled() { return MX_NCCL_LABEL ": " MX_NCCL_WHY; }

std::string nccl_unique_id() {
  throw std::runtime_error(std::string(nccl_compiled()) + "; use --comm mpi or local (host-staged collectives)");
}

std::unique_ptr<DeviceComm> make_nccl_comm_on(gpuStream_t, gpuStream_t, int, const std::string&, int, int) {
  throw std::runtime_error(std::string(nccl_compiled()) + "; use --comm mpi or local (host-staged collectives)");
}

#endif

}  // namespace MX_GPU_NS
}  // namespace mx
