// Workload generators: exact lengths, shared-prefix fractions, distributions,
// Poisson arrivals, presets and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "devtools/loadgen/workload.h"
#include "core/error.h"

using namespace mx::bench;

namespace {
WorkloadSpec custom(const std::string& in, const std::string& out, double shared) {
  WorkloadSpec w;
  w.input = LengthDist::parse(in);
  w.output = LengthDist::parse(out);
  w.shared_prefix = shared;
  w.vocab = 512;
  return w;
}
}  // namespace

TEST(BenchWorkload, FixedLengthsAndSharedPrefix) {
  const auto reqs = make_requests(custom("1000", "50", 0.6), 8, 0);
  ASSERT_EQ(reqs.size(), 8u);
  for (const auto& r : reqs) {
    EXPECT_EQ(r.prompt.size(), 1000u);
    EXPECT_EQ(r.max_tokens, 50);
    EXPECT_EQ(r.shared_tokens, 600);
    EXPECT_TRUE(std::equal(r.prompt.begin(), r.prompt.begin() + 600, reqs[0].prompt.begin()));
    for (int32_t t : r.prompt) EXPECT_TRUE(t >= 3 && t < 512);
  }
  // The unshared suffixes differ (random), so only the prefix is cacheable.
  EXPECT_NE(reqs[0].prompt[600], reqs[1].prompt[600]);
}

TEST(BenchWorkload, NoSharingMeansDistinctPrompts) {
  const auto reqs = make_requests(custom("64", "4", 0.0), 4, 0);
  for (const auto& r : reqs) EXPECT_EQ(r.shared_tokens, 0);
  EXPECT_NE(reqs[0].prompt, reqs[1].prompt);
}

TEST(BenchWorkload, PrefixFractionOfVariableLengths) {
  const auto reqs = make_requests(custom("uniform:100:300", "uniform:5:9", 0.5), 200, 1);
  int lo = 1 << 30, hi = 0;
  for (const auto& r : reqs) {
    const int n = int(r.prompt.size());
    lo = std::min(lo, n);
    hi = std::max(hi, n);
    EXPECT_GE(n, 100);
    EXPECT_LE(n, 300);
    EXPECT_GE(r.max_tokens, 5);
    EXPECT_LE(r.max_tokens, 9);
    EXPECT_EQ(r.shared_tokens, int(std::lround(0.5 * n)));
    // Every prompt's shared part is a prefix of the same sequence.
    const auto& longest = *std::max_element(reqs.begin(), reqs.end(), [](auto& a, auto& b) {
      return a.shared_tokens < b.shared_tokens;
    });
    EXPECT_TRUE(std::equal(r.prompt.begin(), r.prompt.begin() + r.shared_tokens, longest.prompt.begin()));
  }
  EXPECT_LT(lo, 130);  // the draw covers the range
  EXPECT_GT(hi, 270);
}

TEST(BenchWorkload, NormalIsClippedAndCentred) {
  const auto reqs = make_requests(custom("normal:500:50:400:600", "1", 0), 400, 0);
  double sum = 0;
  for (const auto& r : reqs) {
    EXPECT_GE(r.prompt.size(), 400u);
    EXPECT_LE(r.prompt.size(), 600u);
    sum += double(r.prompt.size());
  }
  EXPECT_NEAR(sum / reqs.size(), 500, 10);
}

TEST(BenchWorkload, DeterministicPerSeedAndPoint) {
  WorkloadSpec w = custom("32", "2", 0.25);
  EXPECT_EQ(make_requests(w, 3, 0)[2].prompt, make_requests(w, 3, 0)[2].prompt);
  EXPECT_NE(make_requests(w, 3, 0)[2].prompt, make_requests(w, 3, 1)[2].prompt);
  // The shared prefix is the same across points (a later point hits what an earlier one cached).
  const auto a = make_requests(w, 1, 0)[0].prompt, b = make_requests(w, 1, 5)[0].prompt;
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 8, b.begin()));
}

TEST(BenchWorkload, PoissonArrivals) {
  WorkloadSpec w = custom("8", "1", 0);
  w.request_rate = 20;
  const auto reqs = make_requests(w, 2000, 0);
  for (size_t i = 1; i < reqs.size(); ++i) EXPECT_GT(reqs[i].arrival_s, reqs[i - 1].arrival_s);
  // Mean gap 1/rate; 2000 samples put the mean within a few percent.
  EXPECT_NEAR(reqs.back().arrival_s / reqs.size(), 0.05, 0.005);
  w.request_rate = 0;
  for (const auto& r : make_requests(w, 4, 0)) EXPECT_EQ(r.arrival_s, 0);
}

TEST(BenchWorkload, Presets) {
  const WorkloadSpec aa = preset_workload("aa-single", 1.0);
  EXPECT_EQ(aa.input.min, 10000);
  EXPECT_EQ(aa.output.min, 1500);
  EXPECT_EQ(aa.concurrency, std::vector<int>{1});
  const WorkloadSpec ph = preset_workload("prefill-heavy", 0.01);
  EXPECT_EQ(ph.input.min, 200);
  EXPECT_EQ(ph.output.min, 10);
  EXPECT_DOUBLE_EQ(ph.shared_prefix, 0.6);
  EXPECT_GT(ph.concurrency.size(), 1u);
  EXPECT_EQ(default_requests(ph, 8), 32);
}

TEST(BenchWorkload, BadInputIsAnError) {
  EXPECT_THROW(LengthDist::parse("abc"), mx::Error);
  EXPECT_THROW(LengthDist::parse("0"), mx::Error);
  EXPECT_THROW(LengthDist::parse("uniform:9:3"), mx::Error);
  EXPECT_THROW(LengthDist::parse("normal:10:-1"), mx::Error);
  EXPECT_THROW(LengthDist::parse("gamma:1:2"), mx::Error);
  EXPECT_THROW(preset_workload("nope", 1), mx::Error);
  EXPECT_THROW(preset_workload("aa-single", 0), mx::Error);
  WorkloadSpec w = custom("8", "1", 1.0);
  EXPECT_THROW(make_requests(w, 1, 0), mx::Error);
  w.shared_prefix = 0;
  w.vocab = 2;
  EXPECT_THROW(make_requests(w, 1, 0), mx::Error);
}
