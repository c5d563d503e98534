// Issue 23's GPU plumbing that runs without a GPU: the device placement of
// ranks and data-parallel replicas (parallel/placement.h), the device
// communicator's self-check (comm/device_group.h) driven through a stand-in
// DeviceComm over the in-process host communicator on the CPU backend, the
// refusals of --comm nccl where no NCCL / RCCL can run (HIP-CPU, the CPU,
// in-process ranks), and the byte count a device allreduce records.
#include <gtest/gtest.h>

#include <thread>

#include "backends/backend.h"
#include "backends/device_comm.h"
#include "backends/gpu/gpu_backend.h"
#include "devtools/synthetic.h"
#include "comm/comm_local.h"
#include "comm/device_group.h"
#include "parallel/parallel_model.h"
#include "parallel/placement.h"
#include "backends/gpu_test_util.h"
#include "test_util.h"

using namespace mx;

TEST(DevicePlacement, ReplicaIOfTpRanksTakesDevicesFromITimesTp) {
  // 8 GPUs as TP4 x DP2: replica 0 on 0..3, replica 1 on 4..7.
  for (int i = 0; i < 2; ++i)
    for (int r = 0; r < 4; ++r)
      EXPECT_EQ(device_for_rank("cuda", i, 4, r, 8), "cuda:" + std::to_string(4 * i + r));
  // The spec's index is the first device: two launches of 4 ranks, cuda:0 and cuda:4.
  EXPECT_EQ(device_for_rank("cuda:4", 0, 4, 3, 8), "cuda:7");
  EXPECT_EQ(device_for_rank("hip:2", 1, 2, 1, 8), "hip:5");
  // DP alone (one rank per replica): replica i on device i.
  EXPECT_EQ(device_for_rank("cuda", 5, 1, 0, 8), "cuda:5");
  // Unknown count (0): nothing to check against.
  EXPECT_EQ(device_for_rank("cuda", 3, 4, 0, 0), "cuda:12");
}

TEST(DevicePlacement, HostBackendsAndOneDeviceAreShared) {
  EXPECT_EQ(device_for_rank("cpu", 3, 4, 2, 0), "cpu");
  // One device (HIP-CPU in CI, or one GPU): every rank of every replica shares it.
  EXPECT_EQ(device_for_rank("hip", 1, 2, 1, 1), "hip:0");
  EXPECT_EQ(device_for_rank("cuda:0", 0, 2, 1, 1), "cuda:0");
}

TEST(DevicePlacement, TooFewDevicesOrBadInputIsAClearError) {
  EXPECT_THROW(device_for_rank("cuda", 1, 4, 0, 4), Error);    // replica 1 needs cuda:4..7
  EXPECT_THROW(device_for_rank("cuda:6", 0, 4, 2, 8), Error);  // cuda:8
  EXPECT_THROW(device_for_rank("cuda:x", 0, 1, 0, 8), Error);
  EXPECT_THROW(device_for_rank("cuda", 0, 2, 2, 8), Error);  // rank past the replica
  EXPECT_THROW(device_for_rank("cuda", -1, 2, 0, 8), Error);
}

namespace {
// A DeviceComm over the host communicator, for a host-memory backend: what the
// self-check sees from NCCL, without a GPU.
class HostDeviceComm : public DeviceComm {
 public:
  explicit HostDeviceComm(Comm& c) : c_(c) {}
  std::string name() const override { return "host stand-in"; }
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  void allreduce_sum(float* d, size_t n) override { c_.allreduce_sum(d, n); }
  void allgather(const void* s, size_t b, void* r) override { c_.allgather(s, b, r); }
  void alltoallv(const void* s, const size_t* sb, const size_t* so, void* r, const size_t* rb,
                 const size_t* ro) override {
    c_.alltoallv(s, sb, so, r, rb, ro);
  }

 private:
  Comm& c_;
};

// Swaps two ranks' all-to-all messages: a broken collective the check must catch.
class MixedUpComm final : public HostDeviceComm {
 public:
  explicit MixedUpComm(Comm& c) : HostDeviceComm(c), size_(c.size()) {}
  std::string name() const override { return "mixed up"; }
  void alltoallv(const void* s, const size_t* sb, const size_t* so, void* r, const size_t* rb,
                 const size_t* ro) override {
    HostDeviceComm::alltoallv(s, sb, so, r, rb, ro);
    if (size_ > 1) std::swap(static_cast<int32_t*>(r)[0], static_cast<int32_t*>(r)[ro[1] / 4]);
  }

 private:
  int size_;
};
}  // namespace

TEST(DeviceGroup, SelfCheckPassesOnAWorkingGroupOfOneTwoAndThree) {
  auto cpu = make_backend("cpu");
  for (int P : {1, 2, 3}) {
    auto comms = make_local_comms(P);
    std::vector<std::thread> ts;
    std::vector<int> ok(P, 0);
    for (int r = 0; r < P; ++r)
      ts.emplace_back([&, r] {
        HostDeviceComm dc(*comms[r]);
        try {
          check_device_group(*cpu, dc);
          ok[r] = 1;
        } catch (const std::exception& e) {
          ADD_FAILURE() << P << " ranks, rank " << r << ": " << e.what();
        }
      });
    for (auto& t : ts) t.join();
    for (int r = 0; r < P; ++r) EXPECT_TRUE(ok[r]) << P << " ranks, rank " << r;
  }
}

TEST(DeviceGroup, SelfCheckNamesABrokenCollective) {
  auto cpu = make_backend("cpu");
  auto comms = make_local_comms(2);
  std::vector<std::string> err(2);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] {
      MixedUpComm dc(*comms[r]);
      try {
        check_device_group(*cpu, dc);
      } catch (const Error& e) {
        err[r] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_NE(err[r].find("all-to-all"), std::string::npos) << err[r];
}

TEST(DeviceGroup, NcclWhereItCannotRunIsAClearError) {
  mxtest::TempDir d;
  SyntheticSpec s;
  s.arch = "glm4_moe";
  write_synthetic_model(d.path().string(), s);
  ParallelOptions po;
  po.backend = "nccl";
  po.device = "cpu";  // no device collectives on host memory
  try {
    load_parallel_model(d.path().string(), po);
    ADD_FAILURE() << "--comm nccl on the CPU loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no device communicator"), std::string::npos) << e.what();
  }
  po.tp = 2;  // in-process ranks cannot join one NCCL group one after another
  try {
    load_parallel_model(d.path().string(), po);
    ADD_FAILURE() << "--comm nccl with in-process ranks loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mpirun"), std::string::npos) << e.what();
  }
  po.backend = "gloo";
  EXPECT_THROW(po.validate(), Error);
  // On HIP-CPU (CI's HIP backend) RCCL is not compiled: the message says so.
  const auto gpus = mxtest::gpu_backends();
  for (const std::string& g : gpus) {
    ParallelOptions p;
    p.backend = "rccl", p.device = g;
    try {
      load_parallel_model(d.path().string(), p);
      // A real GPU with NCCL loaded: the self-check passed at load.
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not compiled"), std::string::npos) << g << ": " << e.what();
    }
  }
  std::printf("[ device collectives in this build ] %s\n", device_comm_support().c_str());
}

TEST(DeviceGroup, AllreduceBytesMatchWhatTheHostAllreduceSends) {
  for (int P : {2, 3, 4})
    for (size_t n : {size_t(1), size_t(7), size_t(4096), size_t(4097)}) {
      auto comms = make_local_comms(P);
      std::vector<std::thread> ts;
      for (int r = 0; r < P; ++r)
        ts.emplace_back([&, r] {
          Comm& c = *comms[r];
          std::vector<float> v(n, 1.0f);
          const uint64_t predicted = c.allreduce_bytes(n);
          c.allreduce_sum(v.data(), n);
          EXPECT_EQ(c.stats().bytes[size_t(CommOp::AllReduce)], predicted) << P << " ranks, n " << n;
        });
      for (auto& t : ts) t.join();
    }
}

// The part of the NCCL path that runs without a GPU: libnccl.so.2 opened at run
// time, every entry point resolved, and rank 0's unique id made (ncclGetUniqueId
// needs no device). Where nvcc saw nccl.h the toolkit ships the library too.
TEST(DeviceGroup, NcclLibraryOpensAndMakesAUniqueId) {
#ifdef MXSERVE_HAVE_CUDA
  const std::string compiled = gpu_cuda::nccl_compiled();
  if (compiled.find("not compiled") != std::string::npos) GTEST_SKIP() << "SKIPPED: " << compiled;
  std::string id;
  std::string err;
  try {
    id = gpu_cuda::nccl_unique_id();
  } catch (const std::exception& e) {
    err = e.what();
  }
  MXTEST_NEEDS(err.empty(), "libnccl.so.2 next to the nccl.h this build compiled against: " + err);
  EXPECT_EQ(id.size(), 128u);  // NCCL_UNIQUE_ID_BYTES
  EXPECT_NE(id, std::string(128, '\0'));
  EXPECT_NE(id, gpu_cuda::nccl_unique_id()) << "two groups, two ids";
#else
  GTEST_SKIP() << "SKIPPED: this build compiles no CUDA backend";
#endif
}
