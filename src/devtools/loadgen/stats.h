#pragma once
// Latency statistics: percentiles with linear interpolation between closest
// ranks (numpy's default), so p50 of {1, 2, 3, 4} is 2.5.
#include <nlohmann/json.hpp>
#include <vector>

namespace mx::bench {

// p in [0, 100]; 0 for an empty sample.
double percentile(std::vector<double> v, double p);

struct Summary {
  size_t n = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};
Summary summarize(const std::vector<double>& v);
nlohmann::json to_json(const Summary& s, double unit = 1.0);  // values times unit (e.g. 1e3 for ms)

}  // namespace mx::bench
