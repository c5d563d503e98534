#pragma once
// A fixed pool of worker threads for data-parallel loops. parallel_for splits
// [0, n) into one contiguous range per thread; the calling thread takes range 0.
// claim_each deals items to whichever thread is free (load balancing).
// Work is split by output element, never inside a reduction, so results do not
// depend on the thread count. Workers spin briefly, then sleep (C++20 atomic wait),
// so a decode step with hundreds of small loops does not pay a futex wake each time.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace mx {

// Non-owning, non-allocating reference to a callable void(int64_t begin, int64_t end).
class RangeFn {
 public:
  template <typename F>
  RangeFn(F& f) : obj_(&f), call_([](void* o, int64_t b, int64_t e) { (*static_cast<F*>(o))(b, e); }) {}
  void operator()(int64_t b, int64_t e) const { call_(obj_, b, e); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t);
};

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads = 0);  // 0: one per hardware thread
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn over [0, n) split into ranges aligned to `grain` elements. Safe to
  // call from several threads (e.g. the engines of in-process DP replicas sharing
  // the process's pool): the pool has one job slot, so callers take turns. An
  // exception thrown by fn on any range reaches the caller once every range has
  // ended (the first one thrown; the caller's own range's if it threw).
  void run(int64_t n, RangeFn fn, int64_t grain = 1);

  template <typename F>
  void parallel_for(int64_t n, F&& f, int64_t grain = 1) {
    run(n, RangeFn(f), grain);
  }

  // Runs f(item, worker) once for every item in [0, n): each thread takes the next
  // unclaimed item (in increasing order) whenever it is free, so a thread whose core
  // runs slower (a neighbour's load, a vCPU the hypervisor paused) simply takes
  // fewer, where parallel_for's fixed ranges would leave the others waiting for it
  // (measured on a 2-vCPU VM: one thread 20% slower over a whole prefill). worker
  // is in [0, min(size(), n)) and unique among the threads of this call, for
  // per-thread scratch. Which thread runs an item never changes what it computes.
  // If f throws, that thread stops claiming, the others run on, and the first
  // exception reaches the caller as parallel_for's does (inline: the items after
  // it do not run).
  template <typename F>
  void claim_each(int64_t n, F&& f) {
    if (n <= 0) return;
    std::atomic<int64_t> next{0};
    auto claim = [&](int64_t wb, int64_t we) {
      // One w per thread: run() splits m <= size() indices into size() ranges
      // (do_range), so each holds at most one; inline (nested, one thread, m = 1),
      // w = 0 takes every item and the other w find none left.
      for (int64_t w = wb; w < we; ++w)
        for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) f(i, int(w));
    };
    parallel_for(std::min<int64_t>(n_threads_, n), claim);
  }

  // Whether a loop started on this thread now runs on this thread alone (a
  // one-thread pool, or a call nested in one of the pool's loops).
  bool runs_inline() const;

 private:
  void worker(int idx);
  void do_range(int idx);

  int n_threads_;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex run_mu_;  // one job at a time
  // The job being run; written before generation_ is bumped.
  const RangeFn* job_ = nullptr;
  int64_t job_n_ = 0, job_grain_ = 1;
  std::atomic<bool> job_failed_{false};  // a worker's range threw: job_error_ holds it
  std::exception_ptr job_error_;
};

// The process-wide pool, created on first use. MXSERVE_THREADS overrides its size.
ThreadPool& global_pool();
void set_global_threads(int n);  // before first use of global_pool()

}  // namespace mx
