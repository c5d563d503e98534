#pragma once
// Benchmark workloads: the requests a load generator sends, as exact token-id
// prompts (so the server computes exactly the input length asked for, with or
// without a tokenizer) with a shared, cacheable prefix and arrival times.
//
// Presets (lengths are multiplied by `scale`, for small models and this CPU):
//   aa-single      Artificial Analysis style: one stream, 10k input / 1.5k output.
//   prefill-heavy  20k input of which 60% is a prefix shared by every request,
//                  1k output, fixed concurrency swept over 1, 2, 4, 8, 16.
// A custom workload sets the distributions, shared-prefix fraction and either
// a Poisson request rate or fixed concurrency directly.
#include <cstdint>
#include <string>
#include <vector>

namespace mx::bench {

// A length distribution: fixed (min == max), uniform in [min, max], or normal
// (mean, stddev) clipped to [min, max].
struct LengthDist {
  enum Kind { Fixed, Uniform, Normal } kind = Fixed;
  int min = 1, max = 1;
  double mean = 0, stddev = 0;
  static LengthDist fixed(int n) { return {Fixed, n, n, double(n), 0}; }
  // "N", "uniform:A:B" or "normal:MEAN:STDDEV[:MIN:MAX]"; mx::Error when malformed.
  static LengthDist parse(const std::string& s);
  std::string describe() const;
  LengthDist scaled(double f) const;  // every length times f, at least 1
};

struct WorkloadSpec {
  std::string name = "custom";
  LengthDist input = LengthDist::fixed(512), output = LengthDist::fixed(64);
  double shared_prefix = 0;     // fraction of each input that is the shared prefix, [0, 1)
  double request_rate = 0;      // requests/s (Poisson arrivals); 0: fixed concurrency
  std::vector<int> concurrency = {1};  // one benchmark point per value (ignored with a rate)
  int requests = 0;             // per point; 0: derived from concurrency (see points())
  double duration_s = 0;        // per point: stop sending after this long (0: no limit)
  int vocab = 0;                // token ids drawn from [3, vocab)
  uint64_t seed = 0;

  void validate() const;  // mx::Error naming the bad field
};

// A preset by name ("aa-single", "prefill-heavy"), lengths times scale.
WorkloadSpec preset_workload(const std::string& name, double scale);

struct BenchRequest {
  std::vector<int32_t> prompt;
  int max_tokens = 1;
  int shared_tokens = 0;   // leading prompt tokens equal to the shared prefix
  double arrival_s = 0;    // offset from the start of the point (0 for fixed concurrency)
};

// The requests of one benchmark point: `n` requests, deterministic in (spec.seed, point).
// Every prompt starts with the same prefix of round(shared_prefix * its length)
// tokens (taken from one prefix long enough for the longest input); the rest
// is random. Arrivals are Poisson at spec.request_rate, else all 0.
std::vector<BenchRequest> make_requests(const WorkloadSpec& spec, int n, int point);

// Requests a point sends when spec.requests is 0: enough to fill the
// concurrency a few times (4 x concurrency, at least 4).
int default_requests(const WorkloadSpec& spec, int concurrency);

}  // namespace mx::bench
