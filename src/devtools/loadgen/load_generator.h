#pragma once
// Runs one benchmark point: sends requests to a target at fixed concurrency
// (a closed loop: each of `concurrency` workers sends its next request when
// the previous one ends) or at their Poisson arrival times (an open loop).
#include <map>
#include <string>
#include <vector>

#include "devtools/loadgen/progress.h"
#include "devtools/loadgen/target.h"

namespace mx::bench {

struct PointResult {
  int concurrency = 0;       // workers (closed loop) or 0 with a request rate
  double request_rate = 0;   // requests/s (open loop), 0 for closed
  double wall_s = 0;         // first send to last completion
  std::vector<RequestResult> results;  // requests sent (those not sent before the duration ran out are absent)
  std::map<std::string, double> counters_before, counters_after;
};

// duration_s > 0: no request starts after that many seconds.
PointResult run_point(Target& target, const std::vector<BenchRequest>& reqs, int concurrency, double request_rate,
                      double duration_s, Progress& progress);

}  // namespace mx::bench
