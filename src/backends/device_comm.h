#pragma once
// Collectives on one backend's device buffers, across ranks that each drive one
// device (issue 23): NCCL on CUDA, RCCL on HIP (backends/gpu/nccl_comm.cu). The
// host communicator (comm/comm.h: MPI, threads) stays the group's control
// channel (batches, the NCCL unique id) and the host-staged fallback that works
// on every backend, HIP-CPU included.
//
// Contract: every call enqueues on the backend's communication stream, after
// the compute stream's work enqueued before the call and before the compute
// stream's work enqueued after it (events: backends/backend.h comm_begin; the
// host never waits), every rank of the group makes
// the same calls in the same order, and pointers are device memory of the
// backend that made the communicator. The sum of allreduce_sum is the same on
// every rank (NCCL's ring / tree reduce each element once and broadcast it), so
// tensor-parallel ranks do not drift apart; it may differ in rounding from the
// host communicator's fixed rank-order sum.
//
// Header-only (an interface): the GPU libraries implement it without linking
// the rest of mxserve.
#include <cstddef>
#include <memory>
#include <string>

namespace mx {

class DeviceComm {
 public:
  virtual ~DeviceComm() = default;
  virtual std::string name() const = 0;  // e.g. "nccl 2.28.9"
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In-place sum of n floats over the ranks.
  virtual void allreduce_sum(float* data, size_t n) = 0;
  // Every rank contributes `bytes` from send; recv gets size() * bytes in rank order.
  virtual void allgather(const void* send, size_t bytes, void* recv) = 0;
  // Rank r sends send_bytes[d] bytes at send + send_off[d] to rank d and receives
  // recv_bytes[s] at recv + recv_off[s] from rank s (arrays of size(); Comm::alltoallv's contract).
  virtual void alltoallv(const void* send, const size_t* send_bytes, const size_t* send_off, void* recv,
                         const size_t* recv_bytes, const size_t* recv_off) = 0;
};

}  // namespace mx

namespace mx {

class Backend;

// Rank 0's unique id of a new group on backend b (NCCL on a CUDA backend, RCCL
// on a HIP one); the caller shares it over the host communicator.
std::string device_comm_id(Backend& b);
// This rank's member of the group `id` names, on b's device and stream; blocks
// until all `size` ranks have joined (so in-process ranks cannot build theirs
// one after another: one process per device, as vLLM and sglang run).
std::unique_ptr<DeviceComm> make_device_comm(Backend& b, const std::string& id, int rank, int size);
// What this binary compiled, for logs and --help: e.g. "nccl (cuda): compiled,
// libnccl.so.2 loaded at run time; rccl (hip): not compiled (no rccl/rccl.h)".
std::string device_comm_support();

}  // namespace mx
