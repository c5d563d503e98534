#include "comm/device_group.h"

#include <array>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "backends/backend.h"

namespace mx {

std::unique_ptr<DeviceComm> open_device_group(Backend& b, Comm& host) {
  // [length | id | error text]: length 0 means rank 0 failed and the text says why.
  std::array<char, 1024> msg{};
  if (host.rank() == 0) {
    std::string id, err;
    try {
      id = device_comm_id(b);
      MX_CHECK(!id.empty() && id.size() < 512, "device communicator id of {} bytes", id.size());
    } catch (const std::exception& e) {
      err = e.what();
      id.clear();
    }
    const uint32_t len = uint32_t(id.size());
    std::memcpy(msg.data(), &len, 4);
    std::memcpy(msg.data() + 4, id.data(), len);
    std::strncpy(msg.data() + 516, err.c_str(), msg.size() - 517);
  }
  host.broadcast(msg.data(), msg.size(), 0);
  uint32_t len = 0;
  std::memcpy(&len, msg.data(), 4);
  if (len == 0) fail("--comm nccl: rank 0 could not start the device communicator: {}", msg.data() + 516);
  auto dc = make_device_comm(b, std::string(msg.data() + 4, len), host.rank(), host.size());
  check_device_group(b, *dc);
  if (host.rank() == 0)
    std::fprintf(stderr, "device communicator: %s, %d rank(s), self-check passed (allreduce, allgather, all-to-all)\n",
                 dc->name().c_str(), dc->size());
  return dc;
}

void check_device_group(Backend& b, DeviceComm& dc) {
  const int P = dc.size(), r = dc.rank();
  constexpr int n = 64;
  // allreduce: rank r contributes r + 1 + i / 64 (exact in f32), the sum is known.
  std::vector<float> h(n);
  for (int i = 0; i < n; ++i) h[i] = float(r + 1) + float(i) / 64;
  DevBuffer d(b, n * 4);
  b.upload(d.get(), h.data(), n * 4);
  dc.allreduce_sum(d.get<float>(), n);
  b.download(h.data(), d.get(), n * 4);
  for (int i = 0; i < n; ++i)
    MX_CHECK(h[i] == float(P) * (P + 1) / 2 + float(P) * i / 64, "{}: allreduce gave {} at {}, expected {}",
             dc.name(), h[i], i, float(P) * (P + 1) / 2 + float(P) * i / 64);
  // allgather: each rank's 4 ints say who sent them.
  std::vector<int32_t> mine(4, r), all(size_t(P) * 4, -1);
  DevBuffer s(b, 16), g(b, size_t(P) * 16);
  b.upload(s.get(), mine.data(), 16);
  dc.allgather(s.get(), 16, g.get());
  b.download(all.data(), g.get(), all.size() * 4);
  for (int p = 0; p < P; ++p)
    MX_CHECK(all[size_t(p) * 4] == p && all[size_t(p) * 4 + 3] == p, "{}: allgather put {} in rank {}'s place",
             dc.name(), all[size_t(p) * 4], p);
  // all-to-all: rank r sends (d + 1) ints of value 1000 r + d to rank d.
  std::vector<size_t> sb(P), so(P), rb(P), ro(P);
  std::vector<int32_t> send, recv;
  for (int p = 0; p < P; ++p) {
    so[p] = send.size() * 4;
    for (int i = 0; i <= p; ++i) send.push_back(1000 * r + p);
    sb[p] = size_t(p + 1) * 4;
    rb[p] = size_t(r + 1) * 4;
    ro[p] = size_t(p) * (r + 1) * 4;
  }
  recv.assign(size_t(P) * (r + 1), -1);
  DevBuffer ds(b, send.size() * 4), dr(b, recv.size() * 4);
  b.upload(ds.get(), send.data(), send.size() * 4);
  dc.alltoallv(ds.get(), sb.data(), so.data(), dr.get(), rb.data(), ro.data());
  b.download(recv.data(), dr.get(), recv.size() * 4);
  for (int p = 0; p < P; ++p)
    for (int i = 0; i <= r; ++i)
      MX_CHECK(recv[size_t(p) * (r + 1) + i] == 1000 * p + r, "{}: all-to-all gave {} from rank {}, expected {}",
               dc.name(), recv[size_t(p) * (r + 1) + i], p, 1000 * p + r);
}

}  // namespace mx
