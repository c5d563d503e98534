#pragma once
// The communicator every parallel mode talks through: a group of `size` ranks
// with collectives and point-to-point messages. Backends: in-process threads
// sharing memory (comm_local.h, one host) and MPI (comm_mpi.h, multi-process and
// multi-host; compiled only when CMake finds MPI). A GPU backend (NCCL/RCCL)
// would be a third subclass: the interface works on host pointers today and
// keeps no state beyond the group, so a device-pointer variant can be added.
//
// Determinism: allreduce is built here, in the base class, from alltoallv and
// allgather (reduce-scatter with a fixed rank order, then allgather), so every
// rank gets bitwise the same sum whatever the backend: TP ranks never drift apart.
//
// Every collective counts the bytes this rank sends (per operation kind), so the
// communication volume per token is measured, not computed by hand.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace mx {

enum class CommOp { AllReduce, AllGather, AllToAll, Broadcast, SendRecv, kCount };
const char* comm_op_name(CommOp op);

struct CommStats {
  std::array<uint64_t, size_t(CommOp::kCount)> bytes{};  // sent by this rank
  std::array<uint64_t, size_t(CommOp::kCount)> calls{};
  uint64_t total_bytes() const;
  void reset() { *this = CommStats{}; }
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;

  // Every rank contributes `bytes` from send; recv gets size() * bytes, rank order.
  void allgather(const void* send, size_t bytes, void* recv);
  // Rank r sends send_bytes[d] bytes at send + send_off[d] to rank d and receives
  // recv_bytes[s] at recv + recv_off[s] from rank s (arrays of size()).
  void alltoallv(const void* send, const size_t* send_bytes, const size_t* send_off, void* recv,
                 const size_t* recv_bytes, const size_t* recv_off);
  void broadcast(void* data, size_t bytes, int root);
  // In-place sum over ranks, bitwise identical on every rank.
  void allreduce_sum(float* data, size_t n);
  void send(const void* data, size_t bytes, int dst, int tag);
  void recv(void* data, size_t bytes, int src, int tag);
  virtual void barrier() = 0;

  // Bytes a device communicator (backends/device_comm.h) sent on this group's
  // behalf, counted as the host collective of the same kind would count them.
  void record(CommOp op, uint64_t bytes) {
    stats_.bytes[size_t(op)] += bytes;
    ++stats_.calls[size_t(op)];
  }
  // What allreduce_sum of n floats sends from this rank (its reduce-scatter and
  // allgather), for record() of a device allreduce.
  uint64_t allreduce_bytes(size_t n) const;

  CommStats& stats() { return stats_; }
  const CommStats& stats() const { return stats_; }

 protected:
  virtual void do_allgather(const void* send, size_t bytes, void* recv) = 0;
  virtual void do_alltoallv(const void* send, const size_t* send_bytes, const size_t* send_off,
                            void* recv, const size_t* recv_bytes, const size_t* recv_off) = 0;
  virtual void do_broadcast(void* data, size_t bytes, int root) = 0;
  virtual void do_send(const void* data, size_t bytes, int dst, int tag) = 0;
  virtual void do_recv(void* data, size_t bytes, int src, int tag) = 0;

 private:
  void count(CommOp op, uint64_t bytes);
  CommStats stats_;
  bool in_allreduce_ = false;  // its inner collectives count as AllReduce
};

// A one-rank group: every collective is a copy (no MPI, --tp 1).
std::unique_ptr<Comm> make_self_comm();

// True when this process was started by mpirun/mpiexec (OpenMPI or PMI env)
// with more than one rank.
bool launched_by_mpi();
// The MPI world communicator (MPI_Init on first call, MPI_Finalize at exit).
// mx::Error when this build has no MPI.
Comm& mpi_world();
bool have_mpi();

}  // namespace mx
