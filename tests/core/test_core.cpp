// Core: scalar dtype conversions, thread pool coverage, arena bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <cmath>
#include <vector>

#include "core/arena.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/float_formats.h"
#include "core/thread_pool.h"
#include "test_util.h"

using namespace mx;

TEST(DType, Bf16RoundsToNearestEvenAndKeepsNan) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to even (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(INFINITY))));
}

TEST(DType, F16RoundTripsEveryHalfValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), uint16_t(h)) << std::hex << h;
  }
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(f16_to_f32(f32_to_f16(0x1p-24f)), 0x1p-24f);  // smallest subnormal
}

TEST(DType, Fp8E4m3MatchesExhaustiveNearestEven) {
  // Reference: nearest of the 127 finite magnitudes, ties to the even code.
  auto ref = [](float f) -> uint8_t {
    if (std::isnan(f)) return 0x7f;
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    const float a = std::fabs(f);
    if (a >= 448.0f) return sign | 0x7e;
    uint8_t best = 0;
    float be = INFINITY;
    for (uint8_t c = 0; c < 0x7f; ++c) {
      const float err = std::fabs(fp8e4m3_to_f32(c) - a);
      if (err < be || (err == be && !(c & 1))) best = c, be = err;
    }
    return sign | best;
  };
  for (int c = 0; c < 0x7e; ++c) {  // every value and every midpoint
    const float v = fp8e4m3_to_f32(uint8_t(c)), next = fp8e4m3_to_f32(uint8_t(c + 1));
    for (float x : {v, (v + next) / 2, -v, -(v + next) / 2, std::nextafter((v + next) / 2, 0.0f),
                    std::nextafter((v + next) / 2, 1e9f)})
      EXPECT_EQ(f32_to_fp8e4m3(x), ref(x)) << x;
  }
  // And a 7919-stride sample of all 2^32 bit patterns (the conversion rounds on the f32 bits).
  int bad = 0;
  for (float x : mxtest::sampled_floats(7919))
    if (f32_to_fp8e4m3(x) != ref(x) && ++bad <= 10) ADD_FAILURE() << "bits " << std::hex << f32_bits(x);
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(f32_to_fp8e4m3(1e9f), 0x7e);
  EXPECT_EQ(fp8e4m3_to_f32(0x7e), 448.0f);
  EXPECT_TRUE(std::isnan(fp8e4m3_to_f32(0x7f)));
}

TEST(ThreadPool, CoversEveryIndexOnceForAnySizeAndGrain) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 7, 100, 1001})
    for (int64_t grain : {1, 4, 64}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      }, grain);
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << n << " " << grain << " " << i;
    }
}

// An exception on a worker's range reaches the caller (it used to end the process:
// the workers had no handler), after every range has ended; the pool stays usable.
TEST(ThreadPool, AWorkersExceptionReachesTheCaller) {
  ThreadPool pool(3);
  for (int round = 0; round < 3; ++round) {
    std::atomic<int> ran{0};
    try {
      pool.parallel_for(300, [&](int64_t b, int64_t e) {
        ran += int(e - b);
        if (b > 0) throw std::runtime_error("range at " + std::to_string(b));  // the workers' ranges only
      });
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_TRUE(std::string(e.what()).starts_with("range at ")) << e.what();
    }
    EXPECT_EQ(ran.load(), 300);
    std::atomic<int64_t> sum{0};
    pool.parallel_for(100, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
    EXPECT_EQ(sum.load(), 4950);
  }
}

// Two callers at once (the engines of in-process DP replicas share the
// process's pool): each loop still covers its own range exactly once. Before
// the pool serialised its callers, the second overwrote the first's job and the
// server hung or crashed under `serve --dp 2`.
TEST(ThreadPool, ConcurrentCallersEachGetTheirWholeLoop) {
  ThreadPool pool(3);
  std::atomic<int> bad{0};
  auto caller = [&](int salt) {
    std::vector<int> hits(4096);
    for (int iter = 0; iter < 2000; ++iter) {
      const int64_t n = 1 + (iter * 37 + salt) % 4096;
      std::fill(hits.begin(), hits.end(), 0);
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[size_t(i)] += 1;
      });
      for (int64_t i = 0; i < 4096; ++i) bad += hits[size_t(i)] != (i < n ? 1 : 0);
    }
  };
  std::thread a(caller, 0), b(caller, 11);
  a.join();
  b.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(ThreadPool, NestedLoopsRunInline) {
  ThreadPool pool(2);
  std::atomic<int> total{0};
  pool.parallel_for(4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) pool.parallel_for(10, [&](int64_t x, int64_t y) { total += int(y - x); });
  });
  EXPECT_EQ(total.load(), 40);
}

// claim_each: every item once; each worker index held by one thread at a time.
TEST(ThreadPool, ClaimEachRunsEveryItemOnceWithDistinctWorkers) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 3, 7, 500}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<int> busy[3] = {0, 0, 0};
    std::atomic<int> bad{0};
    pool.claim_each(n, [&](int64_t i, int w) {
      if (w < 0 || w >= std::min<int64_t>(3, n)) return void(++bad);
      if (busy[w].fetch_add(1) != 0) ++bad;
      hits[size_t(i)]++;
      busy[w].fetch_sub(1);
    });
    EXPECT_EQ(bad.load(), 0) << n;
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[size_t(i)].load(), 1) << n << " " << i;
  }
  // Nested in a loop of the pool: inline, on worker 0.
  std::atomic<int> total{0}, nonzero{0};
  pool.parallel_for(4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.claim_each(10, [&](int64_t, int w) { ++total, nonzero += w != 0; });
  });
  EXPECT_EQ(total.load(), 40);
  EXPECT_EQ(nonzero.load(), 0);
}

// An item's exception reaches the caller once every thread has stopped; the other
// threads run the items left, and the pool stays usable.
TEST(ThreadPool, ClaimEachPassesAnItemsExceptionOn) {
  ThreadPool pool(3);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.claim_each(200, [&](int64_t i, int) {
    if (i == 5) throw std::runtime_error("item 5");
    ++ran;
  }), std::runtime_error);
  EXPECT_GE(ran.load(), 1);
  EXPECT_LE(ran.load(), 199);
  std::atomic<int> again{0};
  pool.claim_each(100, [&](int64_t, int) { ++again; });
  EXPECT_EQ(again.load(), 100);
}

// The point of claim_each: a thread held up on one item (a slow core) does not keep
// the rest waiting. Item 0 waits until every other item has run, which parallel_for's
// fixed ranges could never give (item 1 is in item 0's range); here the other
// threads take them all.
TEST(ThreadPool, ClaimEachLetsFreeThreadsTakeASlowThreadsShare) {
  ThreadPool pool(2);
  constexpr int64_t n = 64;
  std::atomic<int64_t> done{0};
  std::atomic<bool> waited_out{false};
  pool.claim_each(n, [&](int64_t i, int) {
    if (i == 0) {
      const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (done.load() < n - 1)
        if (std::chrono::steady_clock::now() > limit) return void(waited_out = true);
        else std::this_thread::yield();
    }
    ++done;
  });
  EXPECT_FALSE(waited_out.load());
  EXPECT_EQ(done.load(), n);
}

TEST(Arena, OverflowIsAnErrorAndRewindReuses) {
  Arena a(1024);
  float* p = a.alloc(100);
  const size_t m = a.mark();
  a.alloc(50);
  a.rewind(m);
  EXPECT_EQ(a.alloc(50), p + 112);  // 100 floats rounded up to 64-byte alignment
  EXPECT_THROW(a.alloc(10000), Error);
}
