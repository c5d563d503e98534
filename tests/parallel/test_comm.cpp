// In-process communicator: every collective's result and byte count, and an
// allreduce that is bitwise the same on every rank.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "comm/comm_local.h"

using namespace mx;

namespace {
template <typename F>
void on_ranks(std::vector<std::unique_ptr<Comm>>& comms, F f) {
  std::vector<std::thread> ts;
  for (auto& c : comms) ts.emplace_back([&f, &c] { f(*c); });
  for (auto& t : ts) t.join();
}
}  // namespace

TEST(CommLocal, CollectivesMoveTheRightBytesAndCountThem) {
  const int P = 3;
  auto comms = make_local_comms(P);
  std::vector<std::vector<float>> reduced(P);
  on_ranks(comms, [&](Comm& c) {
    const int r = c.rank();
    int32_t mine[2] = {r, 10 * r}, all[2 * P];
    c.allgather(mine, sizeof mine, all);
    for (int p = 0; p < P; ++p) EXPECT_EQ(all[2 * p + 1], 10 * p);
    // alltoallv: rank r sends (d + 1) ints of value 100 r + d to rank d.
    std::vector<int32_t> send, recv(64);
    std::vector<size_t> sb(P), so(P), rb(P), ro(P);
    for (int d = 0, off = 0; d < P; ++d) {
      so[d] = off * 4, sb[d] = (d + 1) * 4, off += d + 1;
      for (int i = 0; i <= d; ++i) send.push_back(100 * r + d);
      rb[d] = (r + 1) * 4, ro[d] = size_t(d) * (r + 1) * 4;
    }
    c.alltoallv(send.data(), sb.data(), so.data(), recv.data(), rb.data(), ro.data());
    for (int s = 0; s < P; ++s)
      for (int i = 0; i <= r; ++i) EXPECT_EQ(recv[s * (r + 1) + i], 100 * s + r);
    int64_t v = r == 1 ? 42 : 0;
    c.broadcast(&v, sizeof v, 1);
    EXPECT_EQ(v, 42);
    std::vector<float> x(7);
    for (int i = 0; i < 7; ++i) x[i] = 0.1f * (i + 1) * (r + 1) + 1e-7f * r;
    c.allreduce_sum(x.data(), x.size());
    reduced[r] = x;
    if (r == 0) c.send("hello", 5, 2, 7);
    if (r == 2) {
      char buf[5];
      c.recv(buf, 5, 0, 7);
      EXPECT_EQ(std::string(buf, 5), "hello");
    }
    const CommStats& st = c.stats();
    EXPECT_EQ(st.bytes[size_t(CommOp::AllGather)], 8u * (P - 1));
    uint64_t a2a = 0;
    for (int d = 0; d < P; ++d) a2a += d == r ? 0 : (d + 1) * 4;
    EXPECT_EQ(st.bytes[size_t(CommOp::AllToAll)], a2a);
    EXPECT_EQ(st.bytes[size_t(CommOp::Broadcast)], r == 1 ? 8u * (P - 1) : 0u);
    EXPECT_EQ(st.calls[size_t(CommOp::AllReduce)], 1u);
    EXPECT_GT(st.bytes[size_t(CommOp::AllReduce)], 0u);
  });
  for (int r = 1; r < P; ++r) EXPECT_EQ(std::memcmp(reduced[0].data(), reduced[r].data(), 7 * 4), 0);
  for (int i = 0; i < 7; ++i) EXPECT_NEAR(reduced[0][i], 0.1f * (i + 1) * 6, 1e-5);
}

TEST(CommLocal, SelfCommIsACopy) {
  auto c = make_self_comm();
  float x[3] = {1, 2, 3};
  c->allreduce_sum(x, 3);
  EXPECT_EQ(x[2], 3);
  EXPECT_EQ(c->stats().total_bytes(), 0u);
}
