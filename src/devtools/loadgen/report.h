#pragma once
// Figures of a benchmark point and the JSON / SVG written from them.
//
// Definitions (as vLLM's and Artificial Analysis' benchmarks):
//   output tok/s  completion tokens of successful requests / wall time
//   total tok/s   (prompt + completion tokens) / wall time
//   per node      the above / (gpus / gpus_per_node)
//   TTFT          send -> first token;  TPOT  (e2e - TTFT) / (completion tokens - 1)
//   ITL           gap between consecutive token arrivals
//   per-user tok/s  1 / mean TPOT: the speed one stream sees
//   prefix-cache hit rate  cached / prompt tokens, from the target's counters
//     (mxserve_prompt_tokens_cached_total / mxserve_prompt_tokens_total),
//     else from usage.prompt_tokens_details.cached_tokens
//   spec acceptance  mxserve_spec_accepted_tokens_total / mxserve_spec_draft_tokens_total
//     deltas when the target exports them, else null ("n/a")
//   $/Mtok  price_per_hour / 3600 / tok/s * 1e6 (total and output tokens)
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "devtools/loadgen/load_generator.h"
#include "devtools/loadgen/stats.h"

namespace mx::bench {

struct CostModel {
  double price_per_hour = 0;  // of the whole deployment measured; 0: no $ figures
  int gpus = 1, gpus_per_node = 1;
};

struct PointStats {
  int concurrency = 0;
  double request_rate = 0;
  int requests_ok = 0, requests_failed = 0;
  std::string first_error;
  double wall_s = 0;
  double prompt_tokens = 0, output_tokens = 0;
  double output_tps = 0, total_tps = 0, output_tps_per_node = 0, total_tps_per_node = 0;
  double per_user_tps = 0;
  Summary ttft, tpot, itl, e2e;  // seconds
  std::optional<double> prefix_hit_rate, spec_acceptance;
  std::optional<double> usd_per_mtok_total, usd_per_mtok_output;
  // Requests whose tokens did not arrive one per stream event: then TTFT, TPOT,
  // ITL and per-user tok/s cannot be timed and are reported n/a, with this reason.
  int untimed_requests = 0;
  std::string timing_warning;
  bool timed() const { return untimed_requests == 0; }
};

PointStats compute_stats(const PointResult& p, const CostModel& cost);
nlohmann::json to_json(const PointStats& s);  // latencies in ms
// One line for the terminal.
std::string summary_line(const PointStats& s);

// Output tok/s (y) against per-user tok/s (x), one labelled point per
// benchmark point, joined in sweep order. A self-contained SVG document.
std::string throughput_svg(const std::vector<PointStats>& points, const std::string& title);

}  // namespace mx::bench
