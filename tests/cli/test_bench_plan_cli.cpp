// mxserve bench (one command: launched server, both workloads, JSON + SVG;
// in-process mode) and mxserve plan, end to end; bad flags fail cleanly.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"

using mxtest::run;
using nlohmann::json;

namespace {
std::string stories() { return (mxtest::stories260k() / "stories260K.bin").string(); }
}  // namespace

TEST(CliBench, LaunchServerBothWorkloads) {
  MXTEST_NEEDS(mxtest::fs::exists(stories()), "../shared/models/stories260K");
  mxtest::TempDir d;
  const auto r = run(mxtest::mxserve() + " bench --launch-server --model " + stories() +
                         " --workload aa-single,prefill-heavy --scale 0.005 --concurrency 1,2 --requests 3"
                         " --threads 2 --price-per-hour 2 --no-progress --out " + d.path().string(),
                     true);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* w : {"aa-single", "prefill-heavy"}) {
    const json j = json::parse(mxtest::slurp(d.path() / (std::string(w) + ".json")));
    EXPECT_EQ(j["mode"], "launch-server");
    ASSERT_EQ(j["points"].size(), 2u) << w;
    for (const auto& p : j["points"]) {
      EXPECT_EQ(p["requests_ok"], 3);
      EXPECT_EQ(p["requests_failed"], 0);
      EXPECT_GT(p["output_tok_s"].get<double>(), 0);
      EXPECT_GT(p["ttft_ms"]["p50"].get<double>(), 0);
      EXPECT_GT(p["usd_per_mtok_total"].get<double>(), 0);
      EXPECT_TRUE(p["spec_acceptance"].is_null());  // mxserve exports no spec counters yet
    }
    const std::string svg = mxtest::slurp(d.path() / (std::string(w) + ".svg"));
    EXPECT_NE(svg.find("</svg>"), std::string::npos);
  }
  // prefill-heavy at scale 0.005: 100-token inputs, 60 of them shared; after the first request
  // the prefix (3 full blocks of 16 = 48 tokens) is cached.
  const json ph = json::parse(mxtest::slurp(d.path() / "prefill-heavy.json"));
  EXPECT_EQ(ph["workload"]["input_len"], "100");
  EXPECT_GT(ph["points"][1]["prefix_cache_hit_rate"].get<double>(), 0.4);
}

TEST(CliBench, InProcessCustomWorkload) {
  MXTEST_NEEDS(mxtest::fs::exists(stories()), "../shared/models/stories260K");
  mxtest::TempDir d;
  const auto r = run(mxtest::mxserve() + " bench --in-process --model " + stories() +
                         " --workload custom --input-len uniform:20:40 --output-len 4 --request-rate 50"
                         " --requests 6 --threads 2 --no-progress --out " + d.path().string(),
                     true);
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(mxtest::slurp(d.path() / "custom.json"));
  EXPECT_EQ(j["points"][0]["requests_ok"], 6);
  EXPECT_DOUBLE_EQ(j["points"][0]["request_rate"].get<double>(), 50);
  EXPECT_DOUBLE_EQ(j["points"][0]["output_tokens"].get<double>(), 24);
}

// Against `mxserve serve` by URL, no --vocab: the server's /v1/models says its
// vocabulary (and the model's name), so the bench needs nothing else.
TEST(CliBench, UrlAgainstOurServerNeedsNoVocab) {
  MXTEST_NEEDS(mxtest::fs::exists(stories()), "../shared/models/stories260K");
  mxtest::TempDir d;
  const std::string log = d / "serve.log";
  mxtest::spit(d / "run.sh",
               mxtest::mxserve() + " serve --model " + stories() + " --port 0 --threads 1 2>" + log + " & S=$!\n" +
                   "for i in $(seq 1 100); do P=$(sed -n 's|.*on http://127.0.0.1:\\([0-9]*\\).*|\\1|p' " + log +
                   "); [ -n \"$P\" ] && break; sleep 0.1; done\n" + mxtest::mxserve() +
                   " bench --url http://127.0.0.1:$P --workload custom --input-len 20 --output-len 4 --requests 2"
                   " --concurrency 1 --no-progress --out " + d.path().string() + "\nR=$?\nkill $S; wait $S\nexit $R\n");
  const auto r = run("bash " + (d / "run.sh"), true);
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(mxtest::slurp(d.path() / "custom.json"));
  EXPECT_EQ(j["points"][0]["requests_ok"], 2);
}

TEST(CliBench, BadFlags) {
  const std::string b = mxtest::mxserve() + " bench ";
  EXPECT_NE(run(b + "--workload aa-single").code, 0);  // no target
  EXPECT_NE(run(b + "--url http://127.0.0.1:1 --launch-server --model x").code, 0);
  const auto bad = run(b + "--url http://127.0.0.1:1 --workload nope --out /tmp/mxbench-bad", true);
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("unknown workload"), std::string::npos) << bad.out;
  const auto down = run(b + "--url http://127.0.0.1:1 --vocab 100 --out /tmp/mxbench-bad", true);
  EXPECT_NE(down.code, 0);
  EXPECT_NE(down.out.find("error:"), std::string::npos) << down.out;
  EXPECT_NE(run(b + "--url localhost:80 --out /tmp/mxbench-bad").code, 0);
  EXPECT_NE(run(b + "--in-process --model x --input-len normal:5:-1 --workload custom").code, 0);
}

TEST(CliPlan, RanksLayouts) {
  mxtest::TempDir d;
  const std::string cfg = (mxtest::source_dir() / "tests/data/plan/deepseek_v3_config.json").string();
  const auto r = run(mxtest::mxserve() + " plan --model " + cfg +
                         " --hardware mi355x --workload prefill-heavy --concurrency 64 --dtype fp8"
                         " --price-per-hour 2 --json " + d / "plan.json",
                     true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("TP4xDP2"), std::string::npos);
  const json j = json::parse(mxtest::slurp(d / "plan.json"));
  ASSERT_EQ(j["layouts"].size(), 10u);
  EXPECT_TRUE(j["layouts"][0]["fits"].get<bool>());
  EXPECT_GT(j["layouts"][0]["usd_per_mtok_total"].get<double>(), 0);
  EXPECT_NE(run(mxtest::mxserve() + " plan --model " + cfg + " --hardware tpu").code, 0);
  EXPECT_NE(run(mxtest::mxserve() + " plan --model /nonexistent.json --hardware cpu").code, 0);
  EXPECT_NE(run(mxtest::mxserve() + " plan --model " + cfg + " --hardware cpu --dtype int3").code, 0);
}
