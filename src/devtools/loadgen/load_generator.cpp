#include "devtools/loadgen/load_generator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace mx::bench {

PointResult run_point(Target& target, const std::vector<BenchRequest>& reqs, int concurrency, double request_rate,
                      double duration_s, Progress& progress) {
  using Clock = std::chrono::steady_clock;
  PointResult p;
  p.concurrency = request_rate > 0 ? 0 : concurrency;
  p.request_rate = request_rate;
  p.counters_before = target.counters();
  // Open loop: enough workers that arrivals are not held back by busy ones.
  const int workers = request_rate > 0 ? std::min<int>(int(reqs.size()), 512) : std::min<int>(concurrency, int(reqs.size()));
  MX_CHECK(workers >= 1 || reqs.empty(), "no workers for {} requests", reqs.size());
  std::atomic<size_t> next{0};
  std::mutex mu;
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < reqs.size();) {
      const BenchRequest& q = reqs[i];
      // An arrival past the duration never starts: checked before the wait (at 0.01 requests/s
      // the second arrival is minutes away, and --duration 2 waited for it).
      if (duration_s > 0 && request_rate > 0 && q.arrival_s > duration_s) return;
      if (request_rate > 0) std::this_thread::sleep_until(t0 + std::chrono::duration<double>(q.arrival_s));
      const double start = elapsed();
      if (duration_s > 0 && start > duration_s) return;
      RequestResult r = target.send(q);
      r.start_s = start;
      progress.tick(r.ok);
      std::lock_guard<std::mutex> lk(mu);
      p.results.push_back(std::move(r));
    }
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) threads.emplace_back(work);
  for (auto& t : threads) t.join();
  p.wall_s = elapsed();
  p.counters_after = target.counters();
  return p;
}

}  // namespace mx::bench
