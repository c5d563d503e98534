#include "comm/comm_local.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "core/error.h"

namespace mx {

struct LocalGroup {
  explicit LocalGroup(int n) : n(n), ptrs(n), sizes(n), offs(n) {}
  const int n;
  // Barrier (generation counter).
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  // Published per collective.
  std::vector<const void*> ptrs;
  std::vector<const size_t*> sizes, offs;
  // Point-to-point mailboxes keyed by (src, dst, tag).
  std::mutex mail_mu;
  std::condition_variable mail_cv;
  std::map<std::tuple<int, int, int>, std::deque<std::vector<char>>> mail;

  void barrier() {
    std::unique_lock<std::mutex> lk(mu);
    const uint64_t gen = generation;
    if (++arrived == n) {
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lk, [&] { return generation != gen; });
    }
  }
};

namespace {
class LocalComm final : public Comm {
 public:
  LocalComm(std::shared_ptr<LocalGroup> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->n; }
  std::string backend() const override { return "local"; }
  void barrier() override { g_->barrier(); }

 protected:
  void do_allgather(const void* s, size_t b, void* r) override {
    g_->ptrs[rank_] = s;
    g_->barrier();
    for (int p = 0; p < g_->n; ++p)
      if (b) std::memcpy(static_cast<char*>(r) + size_t(p) * b, g_->ptrs[p], b);
    g_->barrier();
  }
  void do_alltoallv(const void* s, const size_t* sb, const size_t* so, void* r, const size_t* rb,
                    const size_t* ro) override {
    g_->ptrs[rank_] = s;
    g_->sizes[rank_] = sb;
    g_->offs[rank_] = so;
    g_->barrier();
    for (int p = 0; p < g_->n; ++p) {
      const size_t n = g_->sizes[p][rank_];
      MX_CHECK(n == rb[p], "alltoallv: rank {} sends {} bytes to rank {}, which expects {}", p, n, rank_, rb[p]);
      if (n) std::memcpy(static_cast<char*>(r) + ro[p], static_cast<const char*>(g_->ptrs[p]) + g_->offs[p][rank_], n);
    }
    g_->barrier();
  }
  void do_broadcast(void* d, size_t b, int root) override {
    if (rank_ == root) g_->ptrs[root] = d;
    g_->barrier();
    if (rank_ != root && b) std::memcpy(d, g_->ptrs[root], b);
    g_->barrier();
  }
  void do_send(const void* d, size_t b, int dst, int tag) override {
    std::lock_guard<std::mutex> lk(g_->mail_mu);
    const char* c = static_cast<const char*>(d);
    g_->mail[{rank_, dst, tag}].emplace_back(c, c + b);
    g_->mail_cv.notify_all();
  }
  void do_recv(void* d, size_t b, int src, int tag) override {
    std::unique_lock<std::mutex> lk(g_->mail_mu);
    auto& q = g_->mail[{src, rank_, tag}];
    g_->mail_cv.wait(lk, [&] { return !q.empty(); });
    MX_CHECK(q.front().size() == b, "recv: message of {} bytes, expected {}", q.front().size(), b);
    std::memcpy(d, q.front().data(), b);
    q.pop_front();
  }

 private:
  std::shared_ptr<LocalGroup> g_;
  int rank_;
};
}  // namespace

std::vector<std::unique_ptr<Comm>> make_local_comms(int n) {
  MX_CHECK(n >= 1 && n <= 1024, "in-process group of {} ranks", n);
  auto g = std::make_shared<LocalGroup>(n);
  std::vector<std::unique_ptr<Comm>> v;
  for (int r = 0; r < n; ++r) v.push_back(std::make_unique<LocalComm>(g, r));
  return v;
}

}  // namespace mx
