// Percentiles, per-point figures (throughput, TPOT, hit rate, spec acceptance,
// $/Mtok) on hand-made results, Prometheus parsing, the SVG plot.
#include <gtest/gtest.h>

#include "devtools/loadgen/report.h"
#include "devtools/loadgen/stats.h"
#include "devtools/loadgen/target.h"

using namespace mx::bench;

TEST(BenchStats, PercentilesInterpolate) {
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 0), 1);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 100), 4);
  EXPECT_DOUBLE_EQ(percentile({10, 20}, 90), 19);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
  const Summary s = summarize({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  EXPECT_DOUBLE_EQ(s.mean, 5.5);
  EXPECT_DOUBLE_EQ(s.p90, 9.1);
  EXPECT_DOUBLE_EQ(s.max, 10);
}

TEST(BenchReport, PointFigures) {
  PointResult p;
  p.concurrency = 2;
  p.wall_s = 2.0;
  RequestResult a, b, bad;
  a.ok = b.ok = true;
  a.prompt_tokens = b.prompt_tokens = 100;
  a.output_tokens = 11;  // 10 gaps over 1 s after a 0.5 s TTFT: TPOT 0.1 s
  a.ttft_s = 0.5;
  a.e2e_s = 1.5;
  b.output_tokens = 21;  // TPOT 0.05 s
  b.ttft_s = 0.2;
  b.e2e_s = 1.2;
  bad.error = "HTTP 500";
  p.results = {a, b, bad};
  p.counters_before = {{"mxserve_prompt_tokens_total", 1000}, {"mxserve_prompt_tokens_cached_total", 100},
                       {"mxserve_spec_draft_tokens_total", 10}, {"mxserve_spec_accepted_tokens_total", 5}};
  p.counters_after = {{"mxserve_prompt_tokens_total", 1200}, {"mxserve_prompt_tokens_cached_total", 220},
                      {"mxserve_spec_draft_tokens_total", 50}, {"mxserve_spec_accepted_tokens_total", 35}};
  const PointStats s = compute_stats(p, {3.6, 16, 8});  // $3.6/h for 2 nodes
  EXPECT_EQ(s.requests_ok, 2);
  EXPECT_EQ(s.requests_failed, 1);
  EXPECT_EQ(s.first_error, "HTTP 500");
  EXPECT_DOUBLE_EQ(s.output_tps, 16.0);   // 32 tokens / 2 s
  EXPECT_DOUBLE_EQ(s.total_tps, 116.0);   // 232 / 2
  EXPECT_DOUBLE_EQ(s.total_tps_per_node, 58.0);
  EXPECT_DOUBLE_EQ(s.tpot.mean, 0.075);
  EXPECT_NEAR(s.per_user_tps, 1 / 0.075, 1e-9);
  EXPECT_DOUBLE_EQ(*s.prefix_hit_rate, 0.6);    // 120 / 200
  EXPECT_DOUBLE_EQ(*s.spec_acceptance, 0.75);   // 30 / 40
  EXPECT_DOUBLE_EQ(*s.usd_per_mtok_total, 0.001 / 116.0 * 1e6);  // $0.001/s
  EXPECT_DOUBLE_EQ(*s.usd_per_mtok_output, 0.001 / 16.0 * 1e6);
  const auto j = to_json(s);
  EXPECT_DOUBLE_EQ(j["ttft_ms"]["p50"].get<double>(), 350.0);
}

TEST(BenchReport, MissingCountersAreNotApplicable) {
  PointResult p;
  p.wall_s = 1;
  RequestResult a;
  a.ok = true;
  a.prompt_tokens = 10;
  a.cached_tokens = 4;
  a.output_tokens = 1;
  p.results = {a};
  const PointStats s = compute_stats(p, {});
  EXPECT_FALSE(s.spec_acceptance.has_value());
  EXPECT_DOUBLE_EQ(*s.prefix_hit_rate, 0.4);  // from usage, no counters
  EXPECT_FALSE(s.usd_per_mtok_total.has_value());
  EXPECT_TRUE(to_json(s)["spec_acceptance"].is_null());
  EXPECT_NE(summary_line(s).find("spec acceptance n/a"), std::string::npos);
}

// Tokens that did not arrive one per stream event cannot be timed: TTFT, TPOT,
// ITL and per-user speed are n/a with the cause named, never impossible figures.
TEST(BenchReport, BatchedTokensAreNotTimed) {
  PointResult p;
  p.concurrency = 1;
  p.wall_s = 1.0;
  RequestResult a;
  a.ok = true;
  a.output_tokens = 8;
  a.ttft_s = 0.9;
  a.e2e_s = 0.9;
  a.token_events = 1;  // every token in the last chunk
  RequestResult timed = a;
  timed.token_events = 8;
  timed.e2e_s = 1.6;
  p.results = {timed, a};
  const PointStats s = compute_stats(p, {});
  EXPECT_FALSE(s.timed());
  EXPECT_EQ(s.untimed_requests, 1);
  EXPECT_NE(s.timing_warning.find("8 tokens arrived in 1 stream events"), std::string::npos) << s.timing_warning;
  const auto j = to_json(s);
  EXPECT_TRUE(j["ttft_ms"].is_null());
  EXPECT_TRUE(j["tpot_ms"].is_null());
  EXPECT_TRUE(j["per_user_tok_s"].is_null());
  EXPECT_EQ(j["timing_warning"], s.timing_warning);
  EXPECT_DOUBLE_EQ(j["output_tok_s"].get<double>(), 16.0);  // throughput still counts
  EXPECT_NE(summary_line(s).find("TPOT n/a"), std::string::npos);
  p.results = {timed};
  EXPECT_TRUE(compute_stats(p, {}).timed());
}

TEST(BenchReport, PrometheusParsing) {
  const auto m = parse_prometheus(
      "# HELP x y\n# TYPE x counter\nmxserve_prompt_tokens_total 42\n"
      "mxserve_kv_blocks{state=\"free\"} 7\ngarbage\nbad_value abc\n");
  EXPECT_DOUBLE_EQ(m.at("mxserve_prompt_tokens_total"), 42);
  EXPECT_DOUBLE_EQ(m.at("mxserve_kv_blocks{state=\"free\"}"), 7);
  EXPECT_EQ(m.count("garbage"), 0u);
  EXPECT_EQ(m.count("bad_value"), 0u);
}

TEST(BenchReport, SvgPlot) {
  PointStats a, b;
  a.concurrency = 1;
  a.per_user_tps = 30;
  a.output_tps = 30;
  b.concurrency = 8;
  b.per_user_tps = 10;
  b.output_tps = 80;
  const std::string svg = throughput_svg({a, b}, "t <&>");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find("c=8"), std::string::npos);
  EXPECT_NE(svg.find("t &lt;&amp;&gt;"), std::string::npos);
  EXPECT_NE(throughput_svg({}, "empty").find("</svg>"), std::string::npos);
}
