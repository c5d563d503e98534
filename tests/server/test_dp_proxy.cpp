// The data-parallel HTTP router in front of two real servers: shared-prefix
// requests land on one replica (whose prefix cache then hits), streams relay,
// bad bodies are 400s.
#include <gtest/gtest.h>

#include "server/dp_proxy.h"
#include "server/raw_http.h"
#include "server_test_util.h"

using namespace mxtest;

namespace {
struct Router {
  explicit Router(std::vector<int> ports, bool cache_aware = true) {
    mx::server::RouterServerOptions o;
    o.port = 0;
    for (int p : ports) o.replicas.push_back("http://127.0.0.1:" + std::to_string(p));
    o.route.block_size = 16;
    o.route.cache_aware = cache_aware;
    r = std::make_unique<mx::server::RouterServer>(o);
    port = r->bind();
    t = std::thread([this] { r->run(); });
  }
  ~Router() {
    r->shutdown();
    t.join();
  }
  std::unique_ptr<mx::server::RouterServer> r;
  std::thread t;
  int port = 0;
};

json completion(const std::vector<int>& prompt, bool stream = false) {
  return {{"model", "test-model"}, {"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}, {"stream", stream}};
}
}  // namespace

TEST(DpProxy, SharedPrefixesStayOnOneReplicaAndHitItsCache) {
  TempDir d;
  mx::SyntheticSpec s;
  s.arch = "qwen3";
  mx::write_synthetic_model(d.path().string(), s);
  TestServer::Options so;
  TestServer a(d.path().string(), so), b(d.path().string(), so);
  Router router({a.port(), b.port()});
  std::vector<int> prefix;
  for (int i = 0; i < 48; ++i) prefix.push_back(1 + i * 7 % 300);
  for (int g = 0; g < 2; ++g)
    for (int i = 0; i < 3; ++i) {
      std::vector<int> p = prefix;
      p[0] = 1 + g;  // two groups
      for (int j = 0; j < 32; ++j) p.push_back(1 + (i * 31 + j * 3 + g) % 300);
      auto r = http_request(router.port, "POST", "/v1/completions", completion(p, i == 2).dump());
      ASSERT_EQ(r.status, 200) << r.body;
    }
  auto routed = router.r->routed();
  // The groups' first requests are spread; each group then stays put.
  EXPECT_EQ(routed[0], 3u);
  EXPECT_EQ(routed[1], 3u);
  const auto ma = a.engine().metrics(), mb = b.engine().metrics();
  EXPECT_EQ(ma.cached_prompt_tokens + mb.cached_prompt_tokens, 2u * 2 * 48) << "2 later requests x 2 groups hit 48";
  auto bad = http_request(router.port, "POST", "/v1/completions", "{nope");
  EXPECT_EQ(bad.status, 400);
  auto stats = http_request(router.port, "GET", "/router/stats");
  EXPECT_EQ(stats.status, 200);
  EXPECT_EQ(http_request(router.port, "GET", "/health").status, 200);
}

TEST(DpProxy, RoutingUnitsOfPromptsAndChats) {
  EXPECT_EQ(mx::server::routing_units(R"({"prompt": [5, 6, 7]})"), (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(mx::server::routing_units(R"({"prompt": "ab"})"), (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(mx::server::routing_units(R"({"messages": [{"role": "user", "content": "x"}]})").size(), 7u);
  EXPECT_THROW(mx::server::routing_units(R"({"max_tokens": 3})"), mx::Error);
  EXPECT_THROW(mx::server::routing_units("[1"), mx::Error);
  // Nested past kMaxJsonDepth: refused before the prompt is dumped (100,000 levels: SIGSEGV).
  const std::string deep = R"({"prompt":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  try {
    mx::server::routing_units(deep);
    ADD_FAILURE() << "no error";
  } catch (const mx::Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 512 deep"), std::string::npos) << e.what();
  }
}

// Found by a probe of the router: replica URLs it cannot use started (a path dropped silently,
// ftp:// threw on every request and leaked its in-flight count); a streamed request the replica
// refused went out as a 200 stream holding the 400's JSON.
TEST(DpProxy, BadReplicaUrlsAreRefusedAndStreamedErrorsKeepTheirStatus) {
  for (const std::string url : {"notaurl", "", "ftp://127.0.0.1:8001", "http://127.0.0.1:99999", "http://h:1/prefix",
                                "http://:8001"}) {
    mx::server::RouterServerOptions o;
    o.replicas = {url};
    EXPECT_THROW(mx::server::RouterServer r(o), mx::Error) << url;
  }
  for (const std::string url : {"http://127.0.0.1:8001", "https://host", "http://[::1]:8001/"}) {
    mx::server::RouterServerOptions o;
    o.replicas = {url};
    EXPECT_NO_THROW(mx::server::RouterServer r(o)) << url;
  }
  TestServer replica(stories_bin(), stories_opts(2));
  Router router({replica.port()});
  json good = completion({1, 2, 3}, true);
  good["model"] = "stories260K";
  json bad = good;
  bad["max_tokens"] = -1;
  auto r = http_request(router.port, "POST", "/v1/completions", bad.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("max_tokens"), std::string::npos) << r.body;
  EXPECT_EQ(http_request(router.port, "POST", "/v1/completions", completion({1, 2, 3}, true).dump()).status, 404);
  auto ok = post_stream(router.port, "/v1/completions", good);
  EXPECT_EQ(ok.status, 200);
  EXPECT_TRUE(ok.done);
  Router dead({1});  // nothing listens on port 1
  EXPECT_EQ(http_request(dead.port, "POST", "/v1/completions", completion({1, 2, 3}, true).dump()).status, 502);
  auto stats = http_request(dead.port, "GET", "/router/stats");
  EXPECT_NE(stats.body.find("\"in_flight\":0"), std::string::npos) << stats.body;
}

// A client that leaves a non-streamed request: the router shuts its upstream
// connection, and the replica aborts the request (finish reason "abort").
TEST(DpProxy, AClientLeavingANonStreamedRequestAbortsItOnTheReplica) {
  TestServer::Options o = stories_opts(1);  // one sequence at a time: 8 x 480 tokens take a while
  TestServer rep(stories_bin(), o);
  Router router({rep.port()});
  json b = {{"prompt", prompt_of(4, 8)}, {"max_tokens", 480}, {"ignore_eos", true}, {"temperature", 0}, {"n", 8}};
  const std::string body = b.dump();
  const int fd = connect_to(router.port);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
  wait_metrics(rep.port(), [](const std::string& t) { return metric(t, "mxserve_generation_tokens_total") > 0; });
  ::close(fd);
  const std::string m = wait_metrics(
      rep.port(),
      [](const std::string& t) {
        return metric(t, "mxserve_requests_total{finish_reason=\"abort\"}") >= 1 &&
               metric(t, "mxserve_requests_running") == 0 && metric(t, "mxserve_requests_waiting") == 0;
      },
      std::chrono::seconds(60));
  std::printf("[ figures  ] via the router: %.0f of %d tokens generated before the abort\n",
              metric(m, "mxserve_generation_tokens_total"), 8 * 480);
  EXPECT_GE(metric(m, "mxserve_requests_total{finish_reason=\"abort\"}"), 1);
  EXPECT_LT(metric(m, "mxserve_generation_tokens_total"), 8 * 480);
  EXPECT_EQ(post(router.port, "/v1/completions", {{"prompt", {1, 2, 3}}, {"max_tokens", 2}}).status, 200);
}
