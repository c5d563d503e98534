// What every request passes before its route (server/access.h), on `serve` and
// the DP router: --api-key (401), wrong methods (405), non-JSON bodies (415);
// and integer parameters beyond int64 (issue 21, findings 9 to 11).
#include <gtest/gtest.h>

#include "server/dp_proxy.h"
#include "server_test_util.h"

using namespace mxtest;

namespace {

const json kReq = {{"prompt", {1, 2, 3}}, {"max_tokens", 4}, {"temperature", 0}};

TestServer::Options keyed(bool all_routes) {
  TestServer::Options o;
  o.engine.max_running = 2;
  o.access.api_keys = {"sk-one", "sk-two"};
  o.access.protect_all = all_routes;
  return o;
}

HttpResult with_key(int port, const std::string& method, const std::string& path, const std::string& key,
                    const std::string& body = "") {
  return http_request(port, method, path, body, "application/json", {{"Authorization", key}});
}

TEST(Access, ApiKeysGuardTheApiAndOnlyTheApiByDefault) {
  TestServer srv(stories_bin(), keyed(false));
  const int p = srv.port();
  auto none = http_request(p, "POST", "/v1/completions", kReq.dump());
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.j["error"]["code"], "invalid_api_key") << none.body;
  EXPECT_EQ(none.headers.find("WWW-Authenticate")->second, "Bearer");
  EXPECT_EQ(with_key(p, "POST", "/v1/completions", "Bearer sk-on", kReq.dump()).status, 401);  // a prefix
  EXPECT_EQ(with_key(p, "POST", "/v1/completions", "Bearer sk-onex", kReq.dump()).status, 401);
  EXPECT_EQ(with_key(p, "POST", "/v1/completions", "sk-one", kReq.dump()).status, 401);  // not a Bearer credential
  EXPECT_EQ(with_key(p, "GET", "/v1/models", "Bearer wrong").status, 401);
  for (const char* k : {"Bearer sk-one", "Bearer sk-two", "bearer sk-two"}) {
    auto ok = with_key(p, "POST", "/v1/completions", k, kReq.dump());
    EXPECT_EQ(ok.status, 200) << k << ": " << ok.body;
    EXPECT_EQ(ok.j["choices"][0]["token_ids"].size(), 4u);
  }
  EXPECT_EQ(http_request(p, "GET", "/health").status, 200);
  EXPECT_EQ(http_request(p, "GET", "/metrics").status, 200);
}

TEST(Access, AllRoutesGuardsHealthAndMetricsToo) {
  TestServer srv(stories_bin(), keyed(true));
  EXPECT_EQ(http_request(srv.port(), "GET", "/health").status, 401);
  EXPECT_EQ(http_request(srv.port(), "GET", "/metrics").status, 401);
  EXPECT_EQ(with_key(srv.port(), "GET", "/metrics", "Bearer sk-two").status, 200);
}

TEST(Access, WrongMethodIs405AndABodyThatIsNotJsonIs415) {
  const TestServer::Options o;  // no keys, default limits
  TestServer srv(stories_bin(), o);
  const int p = srv.port();
  auto get = http_request(p, "GET", "/v1/completions");
  EXPECT_EQ(get.status, 405) << get.body;
  EXPECT_EQ(get.headers.find("Allow")->second, "POST");
  EXPECT_EQ(get.j["error"]["code"], "method_not_allowed");
  auto post = http_request(p, "POST", "/health", "{}");
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.headers.find("Allow")->second, "GET");
  EXPECT_EQ(http_request(p, "GET", "/v1/nothing").status, 404);
  // A browser form post, or text/plain (what a cross-site page can send without a preflight), is refused.
  for (const char* ct : {"text/plain", "application/x-www-form-urlencoded", "application/jsonp", ""}) {
    auto r = http_request(p, "POST", "/v1/completions", kReq.dump(), ct);
    EXPECT_EQ(r.status, 415) << "'" << ct << "': " << r.body;
  }
  EXPECT_EQ(http_request(p, "POST", "/v1/completions", kReq.dump(), "Application/JSON; charset=utf-8").status, 200);
}

TEST(Access, IntegersBeyondInt64AreTooLargeNotNegative) {
  const TestServer::Options o;  // no keys, default limits
  TestServer srv(stories_bin(), o);
  auto r = http_request(srv.port(), "POST", "/v1/completions",
                        R"({"prompt": [1, 2], "max_tokens": 18446744073709551615})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("too large"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("-1"), std::string::npos) << r.body;
}

TEST(Access, RouterChecksKeysAndPassesThemOn) {
  // Replica with its own key (a remote `serve --api-key`), router with the same one.
  TestServer rep(stories_bin(), keyed(false));
  mx::server::RouterServerOptions ro;
  ro.port = 0;
  ro.replicas = {"http://127.0.0.1:" + std::to_string(rep.port())};
  ro.access.api_keys = {"sk-one"};
  mx::server::RouterServer router(ro);
  const int p = router.bind();
  std::thread t([&] { router.run(); });
  EXPECT_EQ(http_request(p, "POST", "/v1/completions", kReq.dump()).status, 401);
  EXPECT_EQ(with_key(p, "POST", "/v1/completions", "Bearer sk-two", kReq.dump()).status, 401);  // not the router's
  auto ok = with_key(p, "POST", "/v1/completions", "Bearer sk-one", kReq.dump());
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(http_request(p, "GET", "/v1/completions").status, 405);
  EXPECT_EQ(http_request(p, "POST", "/v1/completions", kReq.dump(), "text/plain").status, 401);  // no key first
  EXPECT_EQ(http_request(p, "GET", "/health").status, 200);
  router.shutdown();
  t.join();
}

TEST(Access, KeysFromFlagsAndEnvironment) {
  using mx::server::api_keys_from;
  EXPECT_EQ(api_keys_from({"a"}, "b,,c"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(api_keys_from({}, nullptr).empty());
  EXPECT_TRUE(api_keys_from({}, "").empty());
  // An empty key asked for left the server open without a word.
  EXPECT_THROW(api_keys_from({"a", ""}, nullptr), mx::Error);
  EXPECT_THROW(api_keys_from({}, ","), mx::Error);
  EXPECT_TRUE(mx::server::is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(mx::server::is_loopback_host("localhost"));
  EXPECT_FALSE(mx::server::is_loopback_host("0.0.0.0"));
  EXPECT_FALSE(mx::server::is_loopback_host("10.1.2.3"));
}

}  // namespace
