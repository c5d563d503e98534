#pragma once
// Prometheus text exposition (format 0.0.4) for GET /metrics.
//
// Engine state (gauges, sampled at scrape time from Engine::metrics()):
//   mxserve_requests_waiting, mxserve_requests_running,
//   mxserve_kv_blocks{state="total|used|free|cached"} (used = total - free; the
//   prefix cache's blocks count as used and are also reported as cached),
//   mxserve_prefix_cache_hit_rate (cached / prompt tokens since start).
// Counters: mxserve_prompt_tokens_total, mxserve_prompt_tokens_cached_total,
//   mxserve_prompt_tokens_computed_total, mxserve_generation_tokens_total,
//   mxserve_preemptions_total, mxserve_engine_steps_total,
//   mxserve_requests_total{finish_reason} (one per choice: stop, length, abort, error),
//   mxserve_http_requests_total{code}, mxserve_kernel_fallbacks_total (calls
//   that ran with an untuned kernel shape, backends/registry.h).
// Histograms (seconds): mxserve_time_to_first_token_seconds,
//   mxserve_inter_token_latency_seconds, mxserve_request_duration_seconds.
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace mx::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // "# HELP/# TYPE" header, the _bucket{le=...} lines, _sum and _count.
  void render(std::string& out, const std::string& name, const std::string& help) const;
  uint64_t count() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); the last is +Inf
  double sum_ = 0;
  uint64_t n_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();
  Histogram ttft, inter_token, request_duration;

  void count_finish(const std::string& reason);  // stop | length | abort | error
  void count_http(int status);
  std::string render(const EngineMetrics& em, uint64_t kernel_fallbacks) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> finish_;
  std::map<int, uint64_t> http_;
};

}  // namespace mx::server
