#include "core/thread_pool.h"

#include <immintrin.h>

#include <cstdlib>
#include <memory>
#include <utility>

#include "core/error.h"

namespace mx {

namespace {
thread_local bool t_in_pool = false;
int g_requested_threads = 0;
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::thread::hardware_concurrency());
  if (n_threads <= 0) n_threads = 1;
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::do_range(int idx) {
  int64_t chunks = (job_n_ + job_grain_ - 1) / job_grain_;
  int64_t b = chunks * idx / n_threads_ * job_grain_;
  int64_t e = chunks * (idx + 1) / n_threads_ * job_grain_;
  if (e > job_n_) e = job_n_;
  if (b < e) (*job_)(b, e);
}

void ThreadPool::worker(int idx) {
  t_in_pool = true;
  uint64_t seen = 0;
  for (;;) {
    uint64_t g;
    int spins = 0;
    while ((g = generation_.load(std::memory_order_acquire)) == seen) {
      if (++spins < 20000) {
        _mm_pause();
      } else {
        generation_.wait(seen);
      }
    }
    seen = g;
    if (stop_.load()) return;
    try {
      do_range(idx);
    } catch (...) {  // to the caller of run(), as range 0's would (else std::terminate)
      if (!job_failed_.exchange(true, std::memory_order_relaxed)) job_error_ = std::current_exception();
    }
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(int64_t n, RangeFn fn, int64_t grain) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (n_threads_ == 1 || t_in_pool || n <= grain) {  // nested or tiny: run inline
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> turn(run_mu_);
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  job_failed_.store(false, std::memory_order_relaxed);
  job_error_ = nullptr;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  // Spin briefly (workers usually finish within microseconds), then yield: on
  // an oversubscribed machine a descheduled worker needs this core to finish.
  // Also when range 0 throws: the workers still read *job_ (fn, on this frame).
  struct Join {
    ThreadPool& p;
    ~Join() {
      t_in_pool = false;
      for (int spins = 0; p.pending_.load(std::memory_order_acquire) != 0;)
        if (++spins < 4000)
          _mm_pause();
        else
          std::this_thread::yield();
    }
  };
  {
    Join join{*this};
    t_in_pool = true;
    do_range(0);
  }
  // A worker's exception (written before its pending_ decrement, which the join
  // read with acquire): rethrown here. If range 0 threw too, that one propagates.
  if (job_failed_.load(std::memory_order_relaxed)) std::rethrow_exception(std::exchange(job_error_, nullptr));
}

bool ThreadPool::runs_inline() const { return n_threads_ == 1 || t_in_pool; }

void set_global_threads(int n) { g_requested_threads = n; }

ThreadPool& global_pool() {
  static std::unique_ptr<ThreadPool> pool = [] {
    int n = g_requested_threads;
    if (const char* env = std::getenv("MXSERVE_THREADS"); env && n <= 0) {
      char* end = nullptr;
      long v = std::strtol(env, &end, 10);
      MX_CHECK(end && *end == 0 && v > 0 && v <= 1024, "MXSERVE_THREADS={} is not a thread count",
               env);
      n = int(v);
    }
    return std::make_unique<ThreadPool>(n);
  }();
  return *pool;
}

}  // namespace mx
