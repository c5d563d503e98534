#include "comm/comm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace mx {

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::AllReduce: return "allreduce";
    case CommOp::AllGather: return "allgather";
    case CommOp::AllToAll: return "all-to-all";
    case CommOp::Broadcast: return "broadcast";
    case CommOp::SendRecv: return "send/recv";
    case CommOp::kCount: break;
  }
  return "?";
}

uint64_t CommStats::total_bytes() const {
  uint64_t n = 0;
  for (uint64_t b : bytes) n += b;
  return n;
}

void Comm::count(CommOp op, uint64_t bytes) {
  if (in_allreduce_) op = CommOp::AllReduce;
  stats_.bytes[size_t(op)] += bytes;
  if (!in_allreduce_ || op != CommOp::AllReduce) ++stats_.calls[size_t(op)];
}

void Comm::allgather(const void* send, size_t bytes, void* recv) {
  count(CommOp::AllGather, uint64_t(bytes) * (size() - 1));
  do_allgather(send, bytes, recv);
}

void Comm::alltoallv(const void* send, const size_t* send_bytes, const size_t* send_off, void* recv,
                     const size_t* recv_bytes, const size_t* recv_off) {
  uint64_t n = 0;
  for (int d = 0; d < size(); ++d)
    if (d != rank()) n += send_bytes[d];
  count(CommOp::AllToAll, n);
  do_alltoallv(send, send_bytes, send_off, recv, recv_bytes, recv_off);
}

void Comm::broadcast(void* data, size_t bytes, int root) {
  MX_CHECK(root >= 0 && root < size(), "broadcast: root {} outside the group of {}", root, size());
  count(CommOp::Broadcast, rank() == root ? uint64_t(bytes) * (size() - 1) : 0);
  do_broadcast(data, bytes, root);
}

void Comm::send(const void* data, size_t bytes, int dst, int tag) {
  MX_CHECK(dst >= 0 && dst < size() && dst != rank(), "send: bad destination rank {}", dst);
  count(CommOp::SendRecv, bytes);
  do_send(data, bytes, dst, tag);
}

void Comm::recv(void* data, size_t bytes, int src, int tag) {
  MX_CHECK(src >= 0 && src < size() && src != rank(), "recv: bad source rank {}", src);
  do_recv(data, bytes, src, tag);
}

uint64_t Comm::allreduce_bytes(size_t n) const {
  const int P = size(), r = rank();
  if (P == 1 || n == 0) return 0;
  const size_t chunk = (n + P - 1) / P;
  const size_t mine = std::min(n, size_t(r + 1) * chunk) - std::min(n, size_t(r) * chunk);
  return uint64_t(n - mine) * 4 + uint64_t(chunk) * 4 * (P - 1);
}

void Comm::allreduce_sum(float* data, size_t n) {
  const int P = size(), r = rank();
  if (P == 1 || n == 0) return;
  // Reduce-scatter: rank d owns chunk d and sums every rank's copy of it in
  // rank order 0..P-1 (fixed, so all ranks end with the same bits), then allgather.
  const size_t chunk = (n + P - 1) / P;
  auto lo = [&](int d) { return std::min(n, size_t(d) * chunk); };
  auto len = [&](int d) { return lo(d + 1) - lo(d); };
  std::vector<size_t> sb(P), so(P), rb(P), ro(P);
  for (int d = 0; d < P; ++d) {
    sb[d] = len(d) * 4;
    so[d] = lo(d) * 4;
    rb[d] = len(r) * 4;
    ro[d] = size_t(d) * chunk * 4;
  }
  std::vector<float> parts(size_t(P) * chunk), mine(chunk, 0.0f), all(size_t(P) * chunk);
  ++stats_.calls[size_t(CommOp::AllReduce)];
  in_allreduce_ = true;
  try {
    alltoallv(data, sb.data(), so.data(), parts.data(), rb.data(), ro.data());
    for (size_t i = 0; i < len(r); ++i) {
      float s = parts[i];
      for (int d = 1; d < P; ++d) s += parts[size_t(d) * chunk + i];
      mine[i] = s;
    }
    allgather(mine.data(), chunk * 4, all.data());
  } catch (...) {
    in_allreduce_ = false;
    throw;
  }
  in_allreduce_ = false;
  for (int d = 0; d < P; ++d) std::memcpy(data + lo(d), all.data() + size_t(d) * chunk, len(d) * 4);
}

namespace {
class SelfComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "self"; }
  void barrier() override {}

 protected:
  void do_allgather(const void* s, size_t b, void* r) override {
    if (b) std::memmove(r, s, b);
  }
  void do_alltoallv(const void* s, const size_t* sb, const size_t* so, void* r, const size_t*,
                    const size_t* ro) override {
    if (sb[0]) std::memmove(static_cast<char*>(r) + ro[0], static_cast<const char*>(s) + so[0], sb[0]);
  }
  void do_broadcast(void*, size_t, int) override {}
  void do_send(const void*, size_t, int, int) override { fail("send in a one-rank group"); }
  void do_recv(void*, size_t, int, int) override { fail("recv in a one-rank group"); }
};
}  // namespace

std::unique_ptr<Comm> make_self_comm() { return std::make_unique<SelfComm>(); }

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* s = std::getenv(v)) return std::atoi(s) > 1;
  return false;
}

#ifndef MXSERVE_HAVE_MPI
bool have_mpi() { return false; }
Comm& mpi_world() { fail("this mxserve was built without MPI (install libopenmpi-dev and reconfigure)"); }
#endif

}  // namespace mx
