#include "devtools/loadgen/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace mx::bench {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * double(v.size() - 1);
  const size_t lo = size_t(std::floor(rank)), hi = size_t(std::ceil(rank));
  return v[lo] + (v[hi] - v[lo]) * (rank - double(lo));
}

Summary summarize(const std::vector<double>& v) {
  Summary s;
  s.n = v.size();
  if (v.empty()) return s;
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  s.p50 = percentile(v, 50);
  s.p90 = percentile(v, 90);
  s.p99 = percentile(v, 99);
  s.max = *std::max_element(v.begin(), v.end());
  return s;
}

nlohmann::json to_json(const Summary& s, double unit) {
  return {{"n", s.n},           {"mean", s.mean * unit}, {"p50", s.p50 * unit},
          {"p90", s.p90 * unit}, {"p99", s.p99 * unit},  {"max", s.max * unit}};
}

}  // namespace mx::bench
