#include "sampling/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"

namespace mx {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> random_logits(int64_t n, uint32_t seed, float scale = 3.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(gen);
  return v;
}

// Straightforward reference: full sort, double precision.
std::vector<double> reference_probs(std::vector<float> z, const SamplingParams& p,
                                    const std::vector<int32_t>& history = {}) {
  const size_t V = z.size();
  std::vector<int> count(V, 0);
  for (int32_t t : history) ++count[t];
  for (size_t i = 0; i < V; ++i) {
    if (count[i] == 0) continue;
    float l = z[i];
    if (p.repetition_penalty != 1.0f)
      l = l < 0 ? l * p.repetition_penalty : l / p.repetition_penalty;
    l -= static_cast<float>(count[i]) * p.frequency_penalty + p.presence_penalty;
    z[i] = l;
  }
  for (auto& x : z) if (std::isnan(x)) x = -kInf;
  std::vector<double> out(V, 0.0);
  if (p.temperature < 1e-5f) {
    out[std::max_element(z.begin(), z.end()) - z.begin()] = 1.0;  // first max
    return out;
  }
  std::vector<int> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return z[a] > z[b] || (z[a] == z[b] && a < b);
  });
  const double m = z[order[0]];
  std::vector<double> e(V, 0.0);
  for (size_t i = 0; i < V; ++i) {
    const double d = (z[i] - m) / p.temperature;
    e[i] = d >= -87.0 ? std::exp(d) : 0.0;
  }
  size_t keep = V;
  if (p.top_k > 0) keep = std::min(keep, static_cast<size_t>(p.top_k));
  double mass = 0;
  for (size_t j = 0; j < keep; ++j) mass += e[order[j]];
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (size_t j = 0; j < keep; ++j) {
      cum += e[order[j]] / mass;
      if (cum >= p.top_p) {
        keep = j + 1;
        break;
      }
    }
  }
  double fm = 0;
  for (size_t j = 0; j < keep; ++j) {
    if (e[order[j]] >= p.min_p * e[order[0]] && e[order[j]] > 0) {
      out[order[j]] = e[order[j]];
      fm += e[order[j]];
    }
  }
  for (auto& x : out) x /= fm;
  return out;
}

std::vector<float> sampler_probs(const std::vector<float>& logits, const SamplingParams& p,
                                 const std::vector<int32_t>& history = {}) {
  Sampler s(p, static_cast<int64_t>(logits.size()));
  std::vector<float> out(logits.size(), -1.0f);
  s.probs(logits.data(), history, out.data());
  return out;
}

void expect_matches_reference(const std::vector<float>& logits, const SamplingParams& p,
                              const std::vector<int32_t>& history = {}) {
  const auto got = sampler_probs(logits, p, history);
  const auto want = reference_probs(logits, p, history);
  double sum = 0;
  size_t support = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    ASSERT_EQ(got[i] > 0, want[i] > 0) << "support differs at " << i << " (got " << got[i]
                                       << ", want " << want[i] << ")";
    ASSERT_NEAR(got[i], want[i], 1e-6 + 1e-5 * want[i]) << "at " << i;
    sum += got[i];
    support += got[i] > 0;
  }
  EXPECT_NEAR(sum, 1.0, 1e-5);
  EXPECT_GE(support, 1u);
}

// ---------------------------------------------------------------- params

TEST(SamplingParams, DefaultsAndEdgesAreValid) {
  SamplingParams p;
  EXPECT_NO_THROW(p.validate());
  p.temperature = 0;
  p.top_p = 1;
  p.min_p = 1;
  p.presence_penalty = -2;
  p.frequency_penalty = 2;
  p.repetition_penalty = 1e-3f;
  p.top_k = 1;
  EXPECT_NO_THROW(p.validate());
  EXPECT_TRUE(p.greedy());
}

TEST(SamplingParams, RejectsAbsurdValues) {
  auto bad = [](auto mutate, const char* field) {
    SamplingParams p;
    mutate(p);
    try {
      p.validate();
      ADD_FAILURE() << field << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
    EXPECT_THROW(Sampler(p, 10), Error);
  };
  bad([](SamplingParams& p) { p.temperature = -0.1f; }, "temperature");
  bad([](SamplingParams& p) { p.temperature = kNaN; }, "temperature");
  bad([](SamplingParams& p) { p.temperature = kInf; }, "temperature");
  bad([](SamplingParams& p) { p.top_k = -1; }, "top_k");
  bad([](SamplingParams& p) { p.top_p = 0.0f; }, "top_p");
  bad([](SamplingParams& p) { p.top_p = 1.01f; }, "top_p");
  bad([](SamplingParams& p) { p.top_p = kNaN; }, "top_p");
  bad([](SamplingParams& p) { p.min_p = -0.01f; }, "min_p");
  bad([](SamplingParams& p) { p.min_p = 1.5f; }, "min_p");
  bad([](SamplingParams& p) { p.min_p = kNaN; }, "min_p");
  bad([](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty");
  bad([](SamplingParams& p) { p.repetition_penalty = -1.0f; }, "repetition_penalty");
  bad([](SamplingParams& p) { p.repetition_penalty = kNaN; }, "repetition_penalty");
  bad([](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty");
  bad([](SamplingParams& p) { p.presence_penalty = kNaN; }, "presence_penalty");
  bad([](SamplingParams& p) { p.frequency_penalty = -2.1f; }, "frequency_penalty");
  bad([](SamplingParams& p) { p.frequency_penalty = kNaN; }, "frequency_penalty");
}

TEST(Sampler, RejectsBadVocabAndHistory) {
  EXPECT_THROW(Sampler(SamplingParams{}, 0), Error);
  SamplingParams p;
  p.presence_penalty = 1.0f;
  Sampler s(p, 4);
  const float logits[4] = {1, 2, 3, 4};
  const int32_t bad_hi[] = {1, 4};
  const int32_t bad_lo[] = {-1};
  EXPECT_THROW(s.sample(logits, bad_hi), Error);
  EXPECT_THROW(s.sample(logits, bad_lo), Error);
  // Counts were not left dirty by the failed call.
  const int32_t ok[] = {3};
  std::vector<float> a(4), b(4);
  s.probs(logits, ok, a.data());
  Sampler fresh(p, 4);
  fresh.probs(logits, ok, b.data());
  EXPECT_EQ(a, b);
}

// ---------------------------------------------------------------- rng / argmax

TEST(Rng, GoldenXoshiro256StarStar) {
  // Values from an independent implementation of splitmix64 seeding + xoshiro256**.
  Rng r0(0);
  EXPECT_EQ(r0.next_u64(), 0x99ec5f36cb75f2b4ULL);
  EXPECT_EQ(r0.next_u64(), 0xbf6e1f784956452aULL);
  EXPECT_EQ(r0.next_u64(), 0x1a5f849d4933e6e0ULL);
  EXPECT_EQ(r0.next_u64(), 0x6aa594f1262d2d2cULL);
  Rng r42(42);
  EXPECT_EQ(r42.next_u64(), 0x15780b2e0c2ec716ULL);
  EXPECT_EQ(r42.next_u64(), 0x6104d9866d113a7eULL);
  r42.reseed(42);
  EXPECT_EQ(r42.next_u64(), 0x15780b2e0c2ec716ULL);
}

TEST(Rng, UniformInUnitInterval) {
  Rng r(7);
  double sum = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const float u = r.uniform();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
}

TEST(Argmax, TiesNaNAndInf) {
  const float a[] = {1, 3, 3, 2};
  EXPECT_EQ(argmax(a, 4), 1);
  const float b[] = {kNaN, 1, kNaN, 5, 5};
  EXPECT_EQ(argmax(b, 5), 3);
  const float c[] = {kNaN, kNaN};
  EXPECT_EQ(argmax(c, 2), 0);
  const float d[] = {-kInf, -kInf, -kInf};
  EXPECT_EQ(argmax(d, 3), 0);
  const float e[] = {-kInf, kNaN, -3, kInf, kInf};
  EXPECT_EQ(argmax(e, 5), 3);
  const float f[] = {kNaN, -kInf, -1};
  EXPECT_EQ(argmax(f, 3), 2);
  EXPECT_THROW(argmax(a, 0), Error);
}

// ---------------------------------------------------------------- greedy / determinism

TEST(Sampler, GreedyIsArgmax) {
  SamplingParams p;
  p.temperature = 0;
  p.top_k = 5;  // ignored for greedy
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const auto logits = random_logits(1000, seed);
    Sampler s(p, 1000);
    EXPECT_EQ(s.sample(logits.data()), argmax(logits.data(), 1000));
    std::vector<float> pr(1000);
    s.probs(logits.data(), {}, pr.data());
    EXPECT_EQ(pr[argmax(logits.data(), 1000)], 1.0f);
    EXPECT_EQ(std::accumulate(pr.begin(), pr.end(), 0.0f), 1.0f);
  }
  std::vector<float> tie = {1, 5, 2, 5};
  EXPECT_EQ(Sampler(p, 4).sample(tie.data()), 1);
  p.temperature = 1e-6f;  // below vLLM's epsilon: greedy too
  EXPECT_EQ(Sampler(p, 4).sample(tie.data()), 1);
}

TEST(Sampler, TopK1IsGreedy) {
  SamplingParams p;
  p.top_k = 1;
  p.temperature = 1.5f;
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const auto logits = random_logits(5000, seed);
    p.seed = seed;
    Sampler s(p, 5000);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(s.sample(logits.data()), argmax(logits.data(), 5000));
  }
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedDifferent) {
  const auto logits = random_logits(2000, 1, 1.0f);  // flat enough for lots of entropy
  auto run = [&](uint64_t seed) {
    SamplingParams p;
    p.seed = seed;
    p.top_p = 0.95f;
    Sampler s(p, 2000);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(logits.data(), out));
    return out;
  };
  EXPECT_EQ(run(123), run(123));
  EXPECT_NE(run(123), run(124));
  // reseed() restarts the stream.
  SamplingParams p;
  p.seed = 5;
  Sampler s(p, 2000);
  std::vector<int32_t> a, b;
  for (int i = 0; i < 32; ++i) a.push_back(s.sample(logits.data()));
  s.reseed(5);
  for (int i = 0; i < 32; ++i) b.push_back(s.sample(logits.data()));
  EXPECT_EQ(a, b);
}

// ---------------------------------------------------------------- distribution

TEST(Sampler, ProbsMatchReference) {
  struct Case {
    float t;
    int k;
    float top_p, min_p;
  };
  const Case cases[] = {
      {1.0f, 0, 1.0f, 0.0f},  {0.7f, 0, 1.0f, 0.0f},  {1.0f, 40, 1.0f, 0.0f},
      {1.0f, 0, 0.9f, 0.0f},  {1.3f, 0, 0.5f, 0.0f},  {1.0f, 0, 1.0f, 0.05f},
      {0.8f, 50, 0.9f, 0.0f}, {1.0f, 50, 0.9f, 0.1f}, {1.0f, 0, 0.95f, 0.02f},
      {2.0f, 3000, 0.99f, 0.0f}, {1.0f, 2000, 1.0f, 0.01f}, {1.0f, 5000, 0.8f, 0.0f},
      {1.0f, 10, 1.0f, 0.3f}, {0.5f, 700, 0.97f, 0.001f},
  };
  uint32_t seed = 0;
  for (const auto& c : cases) {
    SamplingParams p;
    p.temperature = c.t;
    p.top_k = c.k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    for (float scale : {0.3f, 2.0f, 6.0f}) {
      SCOPED_TRACE(testing::Message() << "t=" << c.t << " k=" << c.k << " top_p=" << c.top_p
                                      << " min_p=" << c.min_p << " scale=" << scale);
      expect_matches_reference(random_logits(4096, seed++, scale), p);
    }
  }
}

TEST(Sampler, FilteredTokensAreNeverDrawn) {
  const int64_t V = 300;
  const auto logits = random_logits(V, 99, 2.0f);
  SamplingParams ps[3];
  ps[0].top_k = 7;
  ps[1].top_p = 0.6f;
  ps[2].min_p = 0.2f;
  for (auto& p : ps) {
    Sampler s(p, V);
    std::vector<float> pr(V);
    s.probs(logits.data(), {}, pr.data());
    const auto want = reference_probs(logits, p);
    size_t support = 0;
    for (int64_t i = 0; i < V; ++i) {
      EXPECT_EQ(pr[i] > 0, want[i] > 0);
      support += pr[i] > 0;
    }
    EXPECT_LT(support, static_cast<size_t>(V) / 2);
    EXPECT_GT(support, 1u);
    for (int i = 0; i < 20000; ++i) {
      const int32_t t = s.sample(logits.data());
      ASSERT_GT(pr[t], 0.0f) << "drew filtered token " << t;
    }
  }
}

TEST(Sampler, EmpiricalFrequenciesMatchProbs) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 2.5f, 0.0f, -kInf, 1.5f, 2.2f};
  const std::vector<int32_t> history = {4, 4, 1};
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 8;
  p.top_p = 0.97f;
  p.min_p = 0.03f;
  p.repetition_penalty = 1.2f;
  p.frequency_penalty = 0.3f;
  p.presence_penalty = 0.2f;
  p.seed = 2024;
  const int64_t V = static_cast<int64_t>(logits.size());
  Sampler s(p, V);
  std::vector<float> pr(V);
  s.probs(logits.data(), history, pr.data());
  const int n = 200000;
  std::vector<int> hits(V, 0);
  for (int i = 0; i < n; ++i) ++hits[s.sample(logits.data(), history)];
  double chi2 = 0;
  int df = -1;
  for (int64_t i = 0; i < V; ++i) {
    if (pr[i] == 0) {
      EXPECT_EQ(hits[i], 0) << i;
      continue;
    }
    const double expect = n * static_cast<double>(pr[i]);
    chi2 += (hits[i] - expect) * (hits[i] - expect) / expect;
    ++df;
  }
  ASSERT_GE(df, 3);
  EXPECT_LT(chi2, 30.0) << "df=" << df;  // p ~ 1e-4 for df <= 8 (seed is fixed anyway)
}

TEST(Sampler, EmpiricalFrequenciesNoFilters) {
  // No filter: the dense path (draws straight from the exp table, block by block).
  const int64_t V = 600;
  const auto logits = random_logits(V, 17, 1.0f);
  std::vector<int32_t> bins(V);
  for (int64_t i = 0; i < V; ++i) bins[i] = static_cast<int32_t>(i % 6);  // 6 groups
  SamplingParams p;
  p.temperature = 1.3f;
  p.seed = 77;
  Sampler s(p, V);
  std::vector<float> pr(V);
  s.probs(logits.data(), {}, pr.data());
  double want[6] = {};
  for (int64_t i = 0; i < V; ++i) want[bins[i]] += pr[i];
  const int n = 120000;
  int hits[6] = {};
  std::vector<int> per_token(V, 0);
  for (int i = 0; i < n; ++i) {
    const int32_t t = s.sample(logits.data());
    ++hits[bins[t]];
    ++per_token[t];
  }
  double chi2 = 0;
  for (int g = 0; g < 6; ++g) chi2 += (hits[g] - n * want[g]) * (hits[g] - n * want[g]) / (n * want[g]);
  EXPECT_LT(chi2, 25.0);  // df = 5
  // Every token is reachable, including those in the last (partial) block.
  int reached = 0;
  for (int c : per_token) reached += c > 0;
  EXPECT_GT(reached, static_cast<int>(V) * 9 / 10);
}

TEST(Sampler, LargeTopKWhenTheProbeMisleads) {
  // Every 4th logit (the strided probe's slots) is high: the sampled cut-off keeps too few
  // tokens and the sampler must fall back to the whole vocabulary. Ties go to lower ids.
  const int64_t V = 4096;
  std::vector<float> logits(V);
  for (int64_t i = 0; i < V; ++i) logits[i] = i % 4 == 0 ? 10.0f : 0.01f * static_cast<float>(i % 3);
  for (int k : {300, 1500, 2000, 4000}) {
    SamplingParams p;
    p.top_k = k;
    SCOPED_TRACE(k);
    expect_matches_reference(logits, p);
    p.top_p = 0.999f;
    expect_matches_reference(logits, p);
  }
}

TEST(Sampler, Penalties) {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 1.0f};
  const std::vector<int32_t> history = {0, 0, 1, 3};
  auto softmax = [](std::vector<double> z) {
    double m = *std::max_element(z.begin(), z.end()), s = 0;
    for (auto& x : z) s += (x = std::exp(x - m));
    for (auto& x : z) x /= s;
    return z;
  };
  auto check = [&](const SamplingParams& p, std::vector<double> expected_logits) {
    const auto got = sampler_probs(logits, p, history);
    const auto want = softmax(expected_logits);
    for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
  };
  SamplingParams p;
  p.repetition_penalty = 2.0f;  // positive divided, negative multiplied, once per token
  check(p, {1.0, -2.0, 0.5, 0.5});
  p = {};
  p.frequency_penalty = 0.5f;  // times the count
  check(p, {1.0, -1.5, 0.5, 0.5});
  p = {};
  p.presence_penalty = 0.3f;  // once per distinct token
  check(p, {1.7, -1.3, 0.5, 0.7});
  p = {};
  p.presence_penalty = -1.0f;  // negative encourages
  check(p, {3.0, 0.0, 0.5, 2.0});
  p = {};
  p.repetition_penalty = 2.0f;  // all three, repetition first
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.3f;
  check(p, {-0.3, -2.8, 0.5, -0.3});
  p.temperature = 0.5f;  // temperature applies after the penalties
  check(p, {-0.6, -5.6, 1.0, -0.6});

  // Greedy sees the penalties too; no history means no penalty; no state between calls.
  SamplingParams g;
  g.temperature = 0;
  g.presence_penalty = 2.0f;
  Sampler s(g, 4);
  const int32_t h0[] = {0};
  EXPECT_EQ(s.sample(logits.data()), 0);
  EXPECT_EQ(s.sample(logits.data(), h0), 3);
  EXPECT_EQ(s.sample(logits.data(), h0), 3);
  EXPECT_EQ(s.sample(logits.data()), 0);

  // Against the reference on a real-sized vocabulary with filters.
  SamplingParams q;
  q.repetition_penalty = 1.3f;
  q.frequency_penalty = 0.7f;
  q.presence_penalty = -0.4f;
  q.top_p = 0.9f;
  q.top_k = 100;
  const auto big = random_logits(5000, 3);
  std::vector<int32_t> hist;
  for (int i = 0; i < 300; ++i) hist.push_back((i * 7919) % 5000);
  for (int i = 0; i < 50; ++i) hist.push_back(argmax(big.data(), 5000));
  expect_matches_reference(big, q, hist);
}

TEST(Sampler, InfAndNaNLogits) {
  std::vector<float> logits = {-kInf, 1.0f, -kInf, 2.0f, kNaN, 0.5f, -kInf};
  const int64_t V = static_cast<int64_t>(logits.size());
  for (int mode = 0; mode < 4; ++mode) {
    SamplingParams p;
    p.seed = static_cast<uint64_t>(mode);
    if (mode == 1) p.top_k = 2;
    if (mode == 2) p.top_p = 0.99f;
    if (mode == 3) p.temperature = 0;
    Sampler s(p, V);
    std::vector<float> pr(V);
    s.probs(logits.data(), {}, pr.data());
    for (int i : {0, 2, 4, 6}) EXPECT_EQ(pr[i], 0.0f) << i;
    for (int i = 0; i < 2000; ++i) {
      const int32_t t = s.sample(logits.data());
      ASSERT_TRUE(t == 1 || t == 3 || t == 5) << t;
    }
  }
  // Penalties on -inf stay -inf.
  SamplingParams rp;
  rp.repetition_penalty = 1.5f;
  rp.presence_penalty = -2.0f;
  const std::vector<int32_t> hist = {0, 2};
  std::vector<float> pr(V);
  Sampler(rp, V).probs(logits.data(), hist, pr.data());
  EXPECT_EQ(pr[0], 0.0f);
  EXPECT_EQ(pr[2], 0.0f);

  // +inf wins outright (split evenly between +inf entries).
  std::vector<float> pinf = {1.0f, kInf, 3.0f, kInf};
  Sampler(SamplingParams{}, 4).probs(pinf.data(), {}, pr.data());
  EXPECT_EQ(pr[0], 0.0f);
  EXPECT_FLOAT_EQ(pr[1], 0.5f);
  EXPECT_EQ(pr[2], 0.0f);
  EXPECT_FLOAT_EQ(pr[3], 0.5f);

  for (uint64_t seed = 0; seed < 50; ++seed) {
    SamplingParams q;
    q.seed = seed;
    const int32_t t = Sampler(q, 4).sample(pinf.data());
    ASSERT_TRUE(t == 1 || t == 3) << t;
  }

  // Nothing finite left: an error, not a silent token 0.
  std::vector<float> dead = {-kInf, kNaN, -kInf};
  SamplingParams greedy;
  greedy.temperature = 0;
  EXPECT_THROW(Sampler(SamplingParams{}, 3).sample(dead.data()), Error);
  EXPECT_THROW(Sampler(greedy, 3).sample(dead.data()), Error);
}

TEST(Sampler, LargeVocabulary) {
  const int64_t V = 256000;
  const auto peaked = random_logits(V, 11, 3.0f);
  const auto flat = random_logits(V, 12, 0.05f);  // nucleus of ~half the vocabulary
  SamplingParams a;
  a.top_p = 0.9f;
  expect_matches_reference(peaked, a);
  SamplingParams b;
  b.top_p = 0.5f;
  expect_matches_reference(flat, b);
  SamplingParams c;
  c.top_k = 50;
  c.top_p = 0.95f;
  c.min_p = 0.01f;
  expect_matches_reference(peaked, c);
  SamplingParams d;
  d.top_k = 20000;
  expect_matches_reference(flat, d);
  Sampler s(a, V);
  std::vector<float> pr(V);
  s.probs(peaked.data(), {}, pr.data());
  for (int i = 0; i < 200; ++i) ASSERT_GT(pr[s.sample(peaked.data())], 0.0f);
}

TEST(SampleCategorical, DrawsProportionally) {
  const std::vector<float> w = {0.0f, 1.0f, 3.0f, 0.0f, 4.0f};
  Rng r(1);
  std::vector<int> hits(w.size(), 0);
  const int n = 80000;
  for (int i = 0; i < n; ++i) ++hits[sample_categorical(w, r.uniform())];
  EXPECT_EQ(hits[0], 0);
  EXPECT_EQ(hits[3], 0);
  EXPECT_NEAR(hits[1] / double(n), 0.125, 0.006);
  EXPECT_NEAR(hits[2] / double(n), 0.375, 0.01);
  EXPECT_NEAR(hits[4] / double(n), 0.5, 0.01);
  EXPECT_EQ(sample_categorical(w, 0.0f), 1);
  EXPECT_EQ(sample_categorical(w, 0.99999994f), 4);
  const std::vector<float> zero = {0.0f, 0.0f};
  const std::vector<float> neg = {1.0f, -1.0f};
  EXPECT_THROW(sample_categorical(zero, 0.5f), Error);
  EXPECT_THROW(sample_categorical(neg, 0.5f), Error);
}

}  // namespace
}  // namespace mx
