// MPI backend (OpenMPI from Debian). Compiled only when CMake finds MPI
// (MXSERVE_HAVE_MPI); comm.cpp has the stubs otherwise.
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "comm/comm.h"

namespace mx {

namespace {
void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail("{} failed: {}", what, std::string(msg, len));
}

int count_of(size_t bytes) {
  MX_CHECK(bytes <= size_t(INT_MAX), "MPI message of {} bytes is over the 2 GiB limit", bytes);
  return int(bytes);
}

class MpiComm final : public Comm {
 public:
  MpiComm() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      // The engine thread runs the forwards while main waits: calls come from
      // more than one thread, never at once.
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
      MX_CHECK(provided >= MPI_THREAD_SERIALIZED, "MPI provides thread level {}, need SERIALIZED", provided);
      std::atexit([] {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) MPI_Finalize();
      });
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

 protected:
  void do_allgather(const void* s, size_t b, void* r) override {
    check(MPI_Allgather(s, count_of(b), MPI_BYTE, r, count_of(b), MPI_BYTE, MPI_COMM_WORLD), "MPI_Allgather");
  }
  void do_alltoallv(const void* s, const size_t* sb, const size_t* so, void* r, const size_t* rb,
                    const size_t* ro) override {
    std::vector<int> sc(size_), sd(size_), rc(size_), rd(size_);
    for (int p = 0; p < size_; ++p) {
      sc[p] = count_of(sb[p]);
      sd[p] = count_of(so[p]);
      rc[p] = count_of(rb[p]);
      rd[p] = count_of(ro[p]);
    }
    check(MPI_Alltoallv(s, sc.data(), sd.data(), MPI_BYTE, r, rc.data(), rd.data(), MPI_BYTE, MPI_COMM_WORLD),
          "MPI_Alltoallv");
  }
  void do_broadcast(void* d, size_t b, int root) override {
    check(MPI_Bcast(d, count_of(b), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  }
  void do_send(const void* d, size_t b, int dst, int tag) override {
    check(MPI_Send(d, count_of(b), MPI_BYTE, dst, tag, MPI_COMM_WORLD), "MPI_Send");
  }
  void do_recv(void* d, size_t b, int src, int tag) override {
    check(MPI_Recv(d, count_of(b), MPI_BYTE, src, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
  }

 private:
  int rank_ = 0, size_ = 1;
};
}  // namespace

bool have_mpi() { return true; }

Comm& mpi_world() {
  static MpiComm world;
  return world;
}

}  // namespace mx
