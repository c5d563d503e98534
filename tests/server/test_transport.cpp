// The server's HTTP transport (server/http/transport.h) against hostile and
// careless clients, over raw sockets (issue 21, findings 2, 3, 4 and the
// Host / Origin check): slowloris connections closed at the head deadline
// while a normal request is answered, a flood of header fields answered 431
// without keeping memory, a connection limit answered 503, a non-streamed
// request whose client leaves aborted, and the DNS-rebinding check. Timings
// are printed, never asserted (only generous functional bounds).
#include <atomic>
#include <fstream>
#include <gtest/gtest.h>

#include "server/access.h"
#include "server/raw_http.h"
#include "server/server_test_util.h"

using namespace mxtest;

namespace {

double rss_mib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return std::nan("");
}

json greedy(int i, int len, int max_tokens) {
  return {{"prompt", prompt_of(i, len)}, {"max_tokens", max_tokens}, {"ignore_eos", true}, {"temperature", 0}};
}

}  // namespace

TEST(Transport, SlowClientsAreClosedAtTheHeadDeadlineWhileANormalRequestIsAnswered) {
  const int drippers = 300, idle = 1000;
  if (!raise_fd_limit(2 * (drippers + idle) + 512))  // client and server ends of every connection
    GTEST_SKIP() << "needs about 3100 open files; the hard limit (ulimit -Hn) is lower";
  TestServer::Options o = stories_opts(4);
  o.http_limits.head_timeout = std::chrono::seconds(1);
  o.http_limits.max_connections = 4096;
  TestServer srv(stories_bin(), o);
  const int p = srv.port();
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Pad: " +
                           std::string(400, 'a') + "\r\n";
  std::vector<int> drip, half;
  for (int i = 0; i < drippers; ++i) drip.push_back(connect_to(p));
  for (int i = 0; i < idle; ++i) {
    half.push_back(connect_to(p));
    ASSERT_GE(half.back(), 0);
    ASSERT_TRUE(send_all(half.back(), "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"));  // and never the end
  }
  for (int fd : drip) ASSERT_GE(fd, 0);
  // One byte per connection every 100 ms (the head would take 50 s to arrive).
  std::atomic<bool> stop{false};
  std::thread dripper([&] {
    for (size_t pos = 0; !stop; ++pos) {
      for (int fd : drip) ::send(fd, &head[pos % head.size()], 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = Clock::now();
  const HttpResult r = post(p, "/v1/completions", greedy(1, 8, 16));
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j["usage"]["completion_tokens"], 16);
  std::printf("[ figures  ] a 16-token completion among %d dripping and %d half-sent connections: %.1f ms\n",
              drippers, idle, ms);
  // Past the 1 s head deadline every slow connection is closed (generous bound: 30 s).
  std::vector<char> closed(size_t(drippers + idle), 0);
  int n_closed = 0;
  const auto end = Clock::now() + std::chrono::seconds(30);
  while (n_closed < drippers + idle && Clock::now() < end) {
    for (size_t i = 0; i < closed.size(); ++i)
      if (!closed[i] && closed_by_server(i < size_t(drippers) ? drip[i] : half[i - size_t(drippers)])) {
        closed[i] = 1;
        ++n_closed;
      }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  stop = true;
  dripper.join();
  EXPECT_EQ(n_closed, drippers + idle);
  std::printf("[ figures  ] slow connections closed by the server: %d of %d, %.1f s after the request\n", n_closed,
              drippers + idle, std::chrono::duration<double>(Clock::now() - t0).count());
  for (int fd : drip) ::close(fd);
  for (int fd : half) ::close(fd);
  const std::string m = metrics_text(p);
  EXPECT_GE(metric(m, "mxserve_http_requests_total{code=\"408\"}"), 1);  // sent when the socket takes it
  EXPECT_EQ(post(p, "/v1/completions", greedy(2, 8, 4)).status, 200);
}

TEST(Transport, TenThousandHeaderFieldsGet431AndNoMemoryIsKept) {
  TestServer srv(stories_bin(), stories_opts(2));
  const int p = srv.port();
  std::string flood = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (int i = 0; i < 10000; ++i) flood += "X-F" + std::to_string(i) + ": v\r\n";
  flood += "\r\n";
  const double rss0 = rss_mib();
  std::vector<std::thread> th;
  std::vector<std::string> answers(8);
  for (int i = 0; i < 8; ++i)
    th.emplace_back([&, i] {
      const int fd = connect_to(p);
      if (fd < 0) return;
      send_all(fd, flood);  // the server drops what follows its answer
      answers[size_t(i)] = read_until_close(fd);
      ::close(fd);
    });
  for (auto& t : th) t.join();
  for (const std::string& a : answers) {
    EXPECT_EQ(status_of(a), 431) << a.substr(0, 200);
    EXPECT_TRUE(body_of(a).contains("error")) << a;
  }
  const double rss1 = rss_mib();
  std::printf("[ figures  ] 8 requests of 10000 header fields (%zu bytes each): RSS %.1f MiB before, %.1f MiB after\n",
              flood.size(), rss0, rss1);
  // Under the 16 KiB head limit but over 100 fields: 431 by the count.
  std::string many = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (int i = 0; i < 150; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  const std::string a = roundtrip(p, many + "Connection: close\r\n\r\n");
  EXPECT_EQ(status_of(a), 431) << a;
  EXPECT_NE(a.find("over the limit of 100"), std::string::npos) << a;
  // The server goes on.
  EXPECT_EQ(http_request(p, "GET", "/health").status, 200);
  EXPECT_EQ(post(p, "/v1/completions", greedy(3, 8, 4)).status, 200);
}

TEST(Transport, ConnectionsBeyondTheLimitGet503) {
  TestServer::Options o = stories_opts(2);
  o.http_limits.max_connections = 8;
  TestServer srv(stories_bin(), o);
  const int p = srv.port();
  std::vector<int> held;
  for (int i = 0; i < 8; ++i) {  // each answered once and kept alive: counted by the server
    held.push_back(connect_to(p));
    send_all(held.back(), "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    ASSERT_EQ(status_of(read_response(held.back())), 200);
  }
  const std::string over = roundtrip(p, get_with("/health", "Host: 127.0.0.1\r\n"));
  EXPECT_EQ(status_of(over), 503) << over;
  EXPECT_TRUE(body_of(over).contains("error")) << over;
  ::close(held.back());
  held.pop_back();
  int status = -1;  // the freed slot is taken again (the close reaches the server soon; 30 s bound)
  for (auto end = Clock::now() + std::chrono::seconds(30); status != 200 && Clock::now() < end;) {
    status = status_of(roundtrip(p, get_with("/health", "Host: 127.0.0.1\r\n")));
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(status, 200);
  for (int fd : held) ::close(fd);
}

TEST(Transport, ANonStreamedRequestWhoseClientLeavesIsAborted) {
  TestServer srv(stories_bin(), stories_opts(1));  // one sequence at a time: the 8 choices take a while
  const int p = srv.port();
  const int max_tokens = 480;
  // Many choices at once so the generation lasts long enough to be cut (n x 480 tokens).
  json b = greedy(4, 8, max_tokens);
  b["n"] = 8;
  const std::string body = b.dump();
  const int fd = connect_to(p);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
  // Generating: then the client goes away without reading.
  wait_metrics(p, [](const std::string& t) { return metric(t, "mxserve_generation_tokens_total") > 0; });
  ::close(fd);
  const std::string m = wait_metrics(
      p,
      [](const std::string& t) {
        return metric(t, "mxserve_http_requests_total{code=\"499\"}") == 1 && metric(t, "mxserve_requests_running") == 0 &&
               metric(t, "mxserve_requests_waiting") == 0;
      },
      std::chrono::seconds(60));
  const double generated = metric(m, "mxserve_generation_tokens_total");
  std::printf("[ figures  ] client gone: %.0f of %d tokens generated before the abort\n", generated, 8 * max_tokens);
  EXPECT_EQ(metric(m, "mxserve_http_requests_total{code=\"499\"}"), 1);
  EXPECT_GE(metric(m, "mxserve_requests_total{finish_reason=\"abort\"}"), 1);
  EXPECT_LT(generated, 8 * max_tokens);
  for (auto end = Clock::now() + std::chrono::seconds(30); srv.http().in_flight() != 0 && Clock::now() < end;)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(srv.http().in_flight(), 0);
  EXPECT_EQ(metric(m, "mxserve_kv_blocks{state=\"used\"}"), metric(m, "mxserve_kv_blocks{state=\"cached\"}"));
  EXPECT_EQ(post(p, "/v1/completions", greedy(5, 8, 4)).status, 200);
}

TEST(Transport, LoopbackServerRefusesForeignHostsAndOrigins) {
  TestServer::Options o = stories_opts(2);
  o.access.allowed_hosts = {"My.Box"};
  TestServer srv(stories_bin(), o);
  const int p = srv.port();
  const std::string port = std::to_string(p);
  for (const std::string& host : std::vector<std::string>{"evil.example", "evil.example:" + port, "127.0.0.1.evil.example", "0.0.0.0:" + port,
                                 "10.0.0.1", "localhost.evil.example"}) {
    const std::string a = roundtrip(p, get_with("/health", "Host: " + host + "\r\n"));
    EXPECT_EQ(status_of(a), 403) << host << ": " << a;
    EXPECT_EQ(body_of(a)["error"]["code"], "host_not_allowed") << a;
  }
  for (const std::string& host : std::vector<std::string>{"localhost:" + port, "LOCALHOST", "127.0.0.1:" + port, "127.3.2.1", "[::1]:" + port,
                                 "my.box:" + port})
    EXPECT_EQ(status_of(roundtrip(p, get_with("/health", "Host: " + host + "\r\n"))), 200) << host;
  for (const std::string& origin : std::vector<std::string>{"http://evil.example", "https://evil.example:" + port, "null"}) {
    const std::string a = roundtrip(p, get_with("/health", "Host: localhost:" + port + "\r\nOrigin: " + origin + "\r\n"));
    EXPECT_EQ(status_of(a), 403) << origin << ": " << a;
    EXPECT_EQ(body_of(a)["error"]["code"], "origin_not_allowed") << a;
  }
  EXPECT_EQ(status_of(roundtrip(p, get_with("/health", "Host: localhost\r\nOrigin: http://localhost:3000\r\n"))), 200);
  // The API itself, before anything else is looked at.
  const std::string body = greedy(1, 4, 2).dump();
  const std::string post_evil = "POST /v1/completions HTTP/1.1\r\nHost: evil.example\r\nContent-Type: application/json\r\n"
                                "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  EXPECT_EQ(status_of(roundtrip(p, post_evil)), 403);
  // The usual clients send Host: 127.0.0.1:PORT.
  EXPECT_EQ(post(p, "/v1/completions", greedy(1, 4, 2)).status, 200);
}

TEST(Transport, HostOfHeaderValues) {
  using mx::server::host_of_header;
  EXPECT_EQ(host_of_header("LocalHost:8000", false), "localhost");
  EXPECT_EQ(host_of_header("[::1]:8000", false), "[::1]");
  EXPECT_EQ(host_of_header("http://evil.example:80/x", true), "evil.example");
  EXPECT_EQ(host_of_header("null", true), "");
  EXPECT_TRUE(mx::server::is_loopback_name("[::1]"));
  EXPECT_TRUE(mx::server::is_loopback_name("127.0.0.2"));
  EXPECT_FALSE(mx::server::is_loopback_name("127.0.0.1.nip.io"));
  EXPECT_FALSE(mx::server::is_loopback_name(""));
}
