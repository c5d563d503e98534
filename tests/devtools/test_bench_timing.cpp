// mxserve bench against an endpoint whose timings are known: a fake
// OpenAI-compatible server (127.0.0.1, a free port) that streams a first token
// after 300 ms and then one every 40 ms. The bench must measure TTFT, the whole
// request and TPOT near those (wide bounds: a loaded 2-core CI machine delays
// arrivals; a late first token also shortens the measured TPOT),
// and, when the same tokens come batched into one chunk, say n/a with a warning
// instead of impossible figures.
#include <httplib.h>
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "devtools/loadgen/load_generator.h"
#include "devtools/loadgen/progress.h"
#include "devtools/loadgen/report.h"
#include "devtools/loadgen/target.h"

using namespace mx::bench;
using nlohmann::json;

namespace {

constexpr int kTokens = 10;
constexpr int kFirstMs = 300, kStepMs = 40;

class FakeEndpoint {
 public:
  explicit FakeEndpoint(bool batched) {
    svr_.Get("/v1/models", [](const httplib::Request&, httplib::Response& r) {
      r.set_content(json{{"object", "list"}, {"data", {{{"id", "fake"}, {"vocab_size", 100}}}}}.dump(),
                    "application/json");
    });
    svr_.Post("/v1/completions", [batched](const httplib::Request&, httplib::Response& r) {
      r.set_chunked_content_provider("text/event-stream", [batched](size_t, httplib::DataSink& sink) {
        auto chunk = [](const std::vector<int>& ids) {
          json c = {{"choices", {{{"index", 0}, {"text", ""}, {"token_ids", ids}}}}};
          return "data: " + c.dump() + "\n\n";
        };
        std::this_thread::sleep_for(std::chrono::milliseconds(kFirstMs));
        std::vector<int> all;
        for (int i = 0; i < kTokens; ++i) {
          if (i) std::this_thread::sleep_for(std::chrono::milliseconds(kStepMs));
          all.push_back(10 + i);
          if (!batched) {
            const std::string s = chunk({10 + i});
            sink.write(s.data(), s.size());
          }
        }
        std::string tail = batched ? chunk(all) : "";
        json u = {{"choices", json::array()},
                  {"usage", {{"prompt_tokens", 8}, {"completion_tokens", kTokens}, {"total_tokens", 8 + kTokens}}}};
        tail += "data: " + u.dump() + "\n\ndata: [DONE]\n\n";
        sink.write(tail.data(), tail.size());
        sink.done();
        return true;
      });
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    if (port_ <= 0) throw std::runtime_error("fake endpoint: cannot bind 127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeEndpoint() {
    svr_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server svr_;
  std::thread thread_;
  int port_ = 0;
};

PointStats bench_it(const FakeEndpoint& f) {
  auto target = http_target(f.url(), "", 0);
  EXPECT_EQ(target->vocab_size(), 100);  // from /v1/models
  std::vector<BenchRequest> reqs(3);
  for (auto& q : reqs) q.prompt = {1, 2, 3, 4, 5, 6, 7, 8}, q.max_tokens = kTokens;
  Progress quiet(false);
  return compute_stats(run_point(*target, reqs, 1, 0, 0, quiet), {});
}

}  // namespace

TEST(BenchTiming, MeasuresKnownTtftAndTpot) {
  FakeEndpoint f(false);
  const PointStats s = bench_it(f);
  ASSERT_EQ(s.requests_ok, 3) << s.first_error;
  ASSERT_TRUE(s.timed()) << s.timing_warning;
  EXPECT_GE(s.ttft.p50 * 1e3, kFirstMs * 0.95);
  EXPECT_LE(s.ttft.p50 * 1e3, kFirstMs * 3.0);
  EXPECT_GE(s.e2e.p50 * 1e3, (kFirstMs + (kTokens - 1) * kStepMs) * 0.95);
  EXPECT_GE(s.tpot.p50 * 1e3, kStepMs * 0.5);
  EXPECT_LE(s.tpot.p50 * 1e3, kStepMs * 3.0);
  EXPECT_NEAR(s.per_user_tps, 1.0 / s.tpot.mean, 1e-9);
  EXPECT_DOUBLE_EQ(s.output_tokens, 3.0 * kTokens);
}

TEST(BenchTiming, BatchedTokensAreReportedNotApplicable) {
  FakeEndpoint f(true);
  const PointStats s = bench_it(f);
  ASSERT_EQ(s.requests_ok, 3) << s.first_error;
  EXPECT_FALSE(s.timed());
  EXPECT_NE(s.timing_warning.find("10 tokens arrived in 1 stream events"), std::string::npos) << s.timing_warning;
  EXPECT_TRUE(to_json(s)["tpot_ms"].is_null());
  EXPECT_DOUBLE_EQ(s.output_tokens, 3.0 * kTokens);  // throughput still counts every token
}
