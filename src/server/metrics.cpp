#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace mx::server {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  std::lock_guard<std::mutex> lk(mu_);
  ++counts_[i];
  sum_ += v;
  ++n_;
}

uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> lk(mu_);
  return n_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> lk(mu_);
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cum);
  }
  cum += counts_.back();
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cum, name, sum_, name, n_);
}

ServerMetrics::ServerMetrics()
    : ttft({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      inter_token({0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
      request_duration({0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}) {}

void ServerMetrics::count_finish(const std::string& reason) {
  std::lock_guard<std::mutex> lk(mu_);
  ++finish_[reason];
}

void ServerMetrics::count_http(int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++http_[status];
}

std::string ServerMetrics::render(const EngineMetrics& m, uint64_t kernel_fallbacks) const {
  std::string o;
  auto gauge = [&](const char* name, const char* help, double v) {
    o += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, v);
  };
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    o += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
  };
  gauge("mxserve_requests_waiting", "Requests queued for admission (queue depth).", m.waiting);
  gauge("mxserve_requests_running", "Requests admitted and decoding.", m.running);
  o += "# HELP mxserve_kv_blocks KV cache blocks by state (used = total - free; cached blocks are used).\n"
       "# TYPE mxserve_kv_blocks gauge\n";
  o += fmt::format("mxserve_kv_blocks{{state=\"total\"}} {}\n", m.kv_blocks_total);
  o += fmt::format("mxserve_kv_blocks{{state=\"used\"}} {}\n", m.kv_blocks_total - m.kv_blocks_free);
  o += fmt::format("mxserve_kv_blocks{{state=\"free\"}} {}\n", m.kv_blocks_free);
  o += fmt::format("mxserve_kv_blocks{{state=\"cached\"}} {}\n", m.kv_blocks_cached);
  gauge("mxserve_prefix_cache_hit_rate", "Prompt tokens served by the prefix cache / prompt tokens admitted.",
        m.prompt_tokens ? double(m.cached_prompt_tokens) / double(m.prompt_tokens) : 0.0);
  counter("mxserve_prompt_tokens_total", "Prompt tokens of admitted requests.", m.prompt_tokens);
  counter("mxserve_prompt_tokens_cached_total", "Prompt tokens served by the prefix cache.",
          m.cached_prompt_tokens);
  counter("mxserve_prompt_tokens_computed_total", "Prompt tokens run through the model (prefill).",
          m.computed_prompt_tokens);
  counter("mxserve_generation_tokens_total", "Tokens generated.", m.generated_tokens);
  counter("mxserve_preemptions_total", "Requests preempted for KV space (recomputed later).", m.preemptions);
  counter("mxserve_engine_steps_total", "Engine forward steps.", m.steps);
  counter("mxserve_spec_rounds_total", "Speculative verification rounds (sequence decode steps carrying drafts).",
          m.spec_rounds);
  counter("mxserve_spec_draft_tokens_total", "Draft tokens verified.", m.spec_draft_tokens);
  counter("mxserve_spec_accepted_tokens_total", "Draft tokens accepted.", m.spec_accepted_tokens);
  gauge("mxserve_spec_acceptance_rate", "Accepted / drafted tokens.",
        m.spec_draft_tokens ? double(m.spec_accepted_tokens) / double(m.spec_draft_tokens) : 0.0);
  gauge("mxserve_spec_mean_accepted_length", "Tokens emitted per verification round (accepted + 1).",
        m.spec_rounds ? double(m.spec_accepted_tokens + m.spec_rounds) / double(m.spec_rounds) : 0.0);
  counter("mxserve_kernel_fallbacks_total", "Kernel calls that ran with an untuned shape's default config.",
          kernel_fallbacks);
  {
    std::lock_guard<std::mutex> lk(mu_);
    o += "# HELP mxserve_requests_total Finished requests (one per choice) by finish reason.\n"
         "# TYPE mxserve_requests_total counter\n";
    std::map<std::string, uint64_t> f = finish_;
    for (const char* r : {"stop", "length", "abort"}) f.emplace(r, 0);
    for (const auto& [k, v] : f) o += fmt::format("mxserve_requests_total{{finish_reason=\"{}\"}} {}\n", k, v);
    o += "# HELP mxserve_http_requests_total HTTP responses by status code.\n"
         "# TYPE mxserve_http_requests_total counter\n";
    for (const auto& [k, v] : http_) o += fmt::format("mxserve_http_requests_total{{code=\"{}\"}} {}\n", k, v);
  }
  ttft.render(o, "mxserve_time_to_first_token_seconds", "Time from request arrival to its first token.");
  inter_token.render(o, "mxserve_inter_token_latency_seconds", "Time between consecutive tokens of a request.");
  request_duration.render(o, "mxserve_request_duration_seconds", "Time from request arrival to its last token.");
  return o;
}

}  // namespace mx::server
