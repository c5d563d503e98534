#include "devtools/loadgen/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace mx::bench {

namespace {
double delta(const PointResult& p, const std::string& name) {
  auto a = p.counters_after.find(name), b = p.counters_before.find(name);
  if (a == p.counters_after.end()) return -1;
  return a->second - (b == p.counters_before.end() ? 0 : b->second);
}

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

// A "nice" axis maximum: 1, 2 or 5 times a power of ten, at least v.
double nice_max(double v) {
  if (v <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= v) return m * p;
  return 10 * p;
}
}  // namespace

PointStats compute_stats(const PointResult& p, const CostModel& cost) {
  PointStats s;
  s.concurrency = p.concurrency;
  s.request_rate = p.request_rate;
  s.wall_s = p.wall_s;
  std::vector<double> ttft, tpot, itl, e2e, speed;
  double cached = 0;
  for (const RequestResult& r : p.results) {
    if (!r.ok) {
      ++s.requests_failed;
      if (s.first_error.empty()) s.first_error = r.error;
      continue;
    }
    ++s.requests_ok;
    if (!r.timed() && s.untimed_requests++ == 0)
      s.timing_warning = fmt::format(
          "a request's {} tokens arrived in {} stream events, so TTFT / TPOT / ITL cannot be timed (the "
          "endpoint batches tokens into chunks; mxserve serve sends one event per token for token-id prompts)",
          r.output_tokens, r.token_events);
    s.prompt_tokens += r.prompt_tokens;
    s.output_tokens += r.output_tokens;
    cached += r.cached_tokens;
    ttft.push_back(r.ttft_s);
    e2e.push_back(r.e2e_s);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    if (r.output_tokens > 1) tpot.push_back((r.e2e_s - r.ttft_s) / (r.output_tokens - 1));
  }
  s.ttft = summarize(ttft);
  s.tpot = summarize(tpot);
  s.itl = summarize(itl);
  s.e2e = summarize(e2e);
  if (p.wall_s > 0) {
    s.output_tps = s.output_tokens / p.wall_s;
    s.total_tps = (s.prompt_tokens + s.output_tokens) / p.wall_s;
  }
  const double nodes = std::max(1.0, double(cost.gpus)) / std::max(1, cost.gpus_per_node);
  s.output_tps_per_node = s.output_tps / nodes;
  s.total_tps_per_node = s.total_tps / nodes;
  s.per_user_tps = s.tpot.mean > 0 ? 1.0 / s.tpot.mean : 0;
  if (!s.timed()) {
    s.timing_warning = fmt::format("{} of {} requests: {}", s.untimed_requests, s.requests_ok, s.timing_warning);
    s.ttft = s.tpot = s.itl = Summary{};
    s.per_user_tps = 0;
  }
  const double prompt = delta(p, "mxserve_prompt_tokens_total"), hit = delta(p, "mxserve_prompt_tokens_cached_total");
  if (prompt > 0 && hit >= 0) s.prefix_hit_rate = hit / prompt;
  else if (s.prompt_tokens > 0) s.prefix_hit_rate = cached / s.prompt_tokens;
  const double draft = delta(p, "mxserve_spec_draft_tokens_total"),
               accepted = delta(p, "mxserve_spec_accepted_tokens_total");
  if (draft > 0 && accepted >= 0) s.spec_acceptance = accepted / draft;
  if (cost.price_per_hour > 0 && s.total_tps > 0) {
    s.usd_per_mtok_total = cost.price_per_hour / 3600.0 / s.total_tps * 1e6;
    if (s.output_tps > 0) s.usd_per_mtok_output = cost.price_per_hour / 3600.0 / s.output_tps * 1e6;
  }
  return s;
}

nlohmann::json to_json(const PointStats& s) {
  auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json j = {{"concurrency", s.concurrency},
                      {"request_rate", s.request_rate},
                      {"requests_ok", s.requests_ok},
                      {"requests_failed", s.requests_failed},
                      {"wall_s", s.wall_s},
                      {"prompt_tokens", s.prompt_tokens},
                      {"output_tokens", s.output_tokens},
                      {"output_tok_s", s.output_tps},
                      {"total_tok_s", s.total_tps},
                      {"output_tok_s_per_node", s.output_tps_per_node},
                      {"total_tok_s_per_node", s.total_tps_per_node},
                      {"per_user_tok_s", s.timed() ? nlohmann::json(s.per_user_tps) : nlohmann::json(nullptr)},
                      {"ttft_ms", s.timed() ? to_json(s.ttft, 1e3) : nlohmann::json(nullptr)},
                      {"tpot_ms", s.timed() ? to_json(s.tpot, 1e3) : nlohmann::json(nullptr)},
                      {"itl_ms", s.timed() ? to_json(s.itl, 1e3) : nlohmann::json(nullptr)},
                      {"e2e_ms", to_json(s.e2e, 1e3)},
                      {"prefix_cache_hit_rate", opt(s.prefix_hit_rate)},
                      {"spec_acceptance", opt(s.spec_acceptance)},
                      {"usd_per_mtok_total", opt(s.usd_per_mtok_total)},
                      {"usd_per_mtok_output", opt(s.usd_per_mtok_output)}};
  if (!s.first_error.empty()) j["first_error"] = s.first_error;
  if (!s.timed()) j["timing_warning"] = s.timing_warning;
  return j;
}

std::string summary_line(const PointStats& s) {
  auto pct = [](const std::optional<double>& v) { return v ? fmt::format("{:.2f}", *v) : std::string("n/a"); };
  std::string head = s.request_rate > 0 ? fmt::format("rate {:g}/s", s.request_rate)
                                        : fmt::format("concurrency {}", s.concurrency);
  const std::string timing =
      s.timed() ? fmt::format("per-user {:.1f} tok/s, TTFT p50/p90/p99 {:.0f}/{:.0f}/{:.0f} ms, TPOT p50 {:.1f} ms, "
                              "ITL p99 {:.1f} ms",
                              s.per_user_tps, s.ttft.p50 * 1e3, s.ttft.p90 * 1e3, s.ttft.p99 * 1e3, s.tpot.p50 * 1e3,
                              s.itl.p99 * 1e3)
                : std::string("per-user n/a, TTFT n/a, TPOT n/a, ITL n/a");
  std::string line = fmt::format(
      "{}: {} ok{}, output {:.1f} tok/s, total {:.1f} tok/s, {}, prefix hit {}, spec acceptance {}", head,
      s.requests_ok, s.requests_failed ? fmt::format(" ({} failed: {})", s.requests_failed, s.first_error) : "",
      s.output_tps, s.total_tps, timing, pct(s.prefix_hit_rate), pct(s.spec_acceptance));
  if (s.usd_per_mtok_total) line += fmt::format(", ${:.3f}/Mtok total, ${:.3f}/Mtok output", *s.usd_per_mtok_total,
                                                *s.usd_per_mtok_output);
  return line;
}

std::string throughput_svg(const std::vector<PointStats>& points, const std::string& title) {
  const double W = 640, H = 420, L = 70, R = 20, T = 40, B = 55;
  double xmax = 0, ymax = 0;
  for (const auto& p : points) {
    xmax = std::max(xmax, p.per_user_tps);
    ymax = std::max(ymax, p.output_tps);
  }
  xmax = nice_max(xmax * 1.05);
  ymax = nice_max(ymax * 1.05);
  auto X = [&](double v) { return L + v / xmax * (W - L - R); };
  auto Y = [&](double v) { return H - B - v / ymax * (H - T - B); };
  std::string o = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
      W, H, W, H, W / 2, xml_escape(title));
  for (int i = 0; i <= 5; ++i) {  // grid and tick labels
    const double xv = xmax * i / 5, yv = ymax * i / 5;
    o += fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#ddd\"/>\n", X(xv), T, X(xv), H - B);
    o += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n", L, Y(yv), W - R, Y(yv));
    o += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{:g}</text>\n", X(xv), H - B + 16, xv);
    o += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>\n", L - 6, Y(yv) + 4, yv);
  }
  o += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", L, H - B, W - R, H - B);
  o += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", L, T, L, H - B);
  o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">per-user speed, output tok/s (1 / mean TPOT)</text>\n",
                   (L + W - R) / 2, H - 12);
  o += fmt::format("<text x=\"16\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {})\">"
                   "throughput, output tok/s</text>\n", (T + H - B) / 2, (T + H - B) / 2);
  std::string path;
  for (const auto& p : points) path += fmt::format("{:.1f},{:.1f} ", X(p.per_user_tps), Y(p.output_tps));
  if (points.size() > 1) o += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"" + path + "\"/>\n";
  for (const auto& p : points) {
    const std::string label = p.request_rate > 0 ? fmt::format("{:g}/s", p.request_rate) : fmt::format("c={}", p.concurrency);
    o += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"#1f77b4\"/>\n", X(p.per_user_tps), Y(p.output_tps));
    o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", X(p.per_user_tps) + 6, Y(p.output_tps) - 6, label);
  }
  o += "</svg>\n";
  return o;
}

}  // namespace mx::bench
