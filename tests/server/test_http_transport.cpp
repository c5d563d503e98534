// server/http/transport.h on its own (a handler of the test's, no engine):
// keep-alive and pipelining, chunked streams (HTTP/1.0's to the close), the Host
// header HTTP/1.1 requires, the disconnect signal for
// blocking and streaming handlers, each limit's answer (400, 408, 413 after a
// lingering close, 431, 500), HEAD, 100-continue, idle close, and a stop that
// lets an answer in progress finish. Small enough to build alone under
// ASan/UBSan or TSan with transport.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <memory>
#include <thread>

#include "server/http/transport.h"
#include "server/raw_http.h"

using namespace mxtest;
using mx::server::HttpExchange;
using mx::server::HttpRequest;
using mx::server::HttpResponse;
using mx::server::HttpTransport;
using mx::server::HttpTransportOptions;

namespace {

// A transport on a free loopback port, served on its own thread.
class Served {
 public:
  Served(HttpTransportOptions o, mx::server::HttpHandler h) : t_(std::move(o), std::move(h)) {
    port_ = t_.bind();
    th_ = std::thread([this] { t_.run(); });
  }
  ~Served() {
    t_.stop();
    th_.join();
  }
  int port() const { return port_; }
  HttpTransport& transport() { return t_; }

 private:
  HttpTransport t_;
  std::thread th_;
  int port_ = 0;
};

HttpTransportOptions opts() {
  HttpTransportOptions o;
  o.port = 0;
  o.workers = 4;
  o.limits.io_threads = 2;  // the servers use 1: here the strands are what keeps each connection's state whole
  o.error_body = [](int status, const std::string& m) { return "{\"error\":{\"message\":\"" + m + "\"}}"; };
  return o;
}

void echo(const HttpRequest& q, HttpExchange& out) {
  HttpResponse r;
  r.set_content(q.method + " " + q.path + " " + q.body + " host=" + q.header("HOST"), "text/plain");
  out.respond(std::move(r));
}

std::string body_text(const std::string& response) {
  const size_t h = response.find("\r\n\r\n");
  return h == std::string::npos ? "" : response.substr(h + 4);
}

}  // namespace

TEST(HttpTransport, KeepAlivePipeliningAndPercentDecodedPaths) {
  Served s(opts(), echo);
  const int fd = connect_to(s.port());
  ASSERT_GE(fd, 0);
  // Two requests in one write: answered in order on the one connection.
  ASSERT_TRUE(send_all(fd, "GET /a%2Fb?x=1 HTTP/1.1\r\nHost: h1\r\n\r\nPOST /c HTTP/1.1\r\nHost: h2\r\n"
                           "Content-Length: 3\r\nConnection: close\r\n\r\nxyz"));
  const std::string r = read_until_close(fd);
  EXPECT_EQ(status_of(r), 200) << r;
  const size_t first = r.find("GET /a/b  host=h1"), second = r.find("POST /c xyz host=h2");
  EXPECT_NE(first, std::string::npos) << r;
  EXPECT_NE(second, std::string::npos) << r;
  EXPECT_LT(first, second) << r;
  ::close(fd);
}

TEST(HttpTransport, StreamsChunksAndEndsTheStream) {
  Served s(opts(), [](const HttpRequest&, HttpExchange& out) {
    ASSERT_TRUE(out.start_stream(200, {{"Content-Type", "text/event-stream"}}));
    for (const char* c : {"data: 1\n\n", "", "data: 2\n\n"}) EXPECT_TRUE(out.write(c));
    EXPECT_TRUE(out.end_stream());
    EXPECT_FALSE(out.write("late"));
  });
  const std::string r = roundtrip(s.port(), get_with("/s", "Host: x\r\n"));
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_NE(r.find("Transfer-Encoding: chunked"), std::string::npos) << r;
  EXPECT_NE(r.find("9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"), std::string::npos) << r;
}

// HTTP/1.0 has no chunked coding: the stream's bytes as they are, ended by the close
// (a probe found chunk sizes inside an HTTP/1.0 body).
TEST(HttpTransport, StreamsToAnHttp10ClientEndByTheClose) {
  Served s(opts(), [](const HttpRequest&, HttpExchange& out) {
    ASSERT_TRUE(out.start_stream(200, {{"Content-Type", "text/event-stream"}}));
    for (const char* c : {"data: 1\n\n", "", "data: 2\n\n"}) EXPECT_TRUE(out.write(c));
    EXPECT_TRUE(out.end_stream());
  });
  const std::string r = roundtrip(s.port(), "GET /s HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_EQ(r.find("Transfer-Encoding"), std::string::npos) << r;
  EXPECT_EQ(body_text(r), "data: 1\n\ndata: 2\n\n") << r;
}

// Cut short, that stream ends in a reset: a plain close would read as a whole body.
TEST(HttpTransport, AnHttp10StreamCutShortEndsInAReset) {
  Served s(opts(), [](const HttpRequest&, HttpExchange& out) {
    ASSERT_TRUE(out.start_stream(200, {{"Content-Type", "text/event-stream"}}));
    EXPECT_TRUE(out.write("data: 1\n\n"));
  });  // returns without end_stream
  const int fd = connect_to(s.port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd, "GET /s HTTP/1.0\r\n\r\n"));
  char buf[4096];
  ssize_t n = 0;
  int err = 0;
  const auto end = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      err = errno;
      break;
    }
  }
  EXPECT_EQ(n, -1);
  EXPECT_EQ(err, ECONNRESET);
  ::close(fd);
}

// RFC 9112 section 3.2: no Host in an HTTP/1.1 request, or two, is a 400 (HTTP/1.0 needs none).
TEST(HttpTransport, Http11WithoutOneHostIsA400) {
  Served s(opts(), echo);
  EXPECT_EQ(status_of(roundtrip(s.port(), get_with("/a", ""))), 400);
  EXPECT_EQ(status_of(roundtrip(s.port(), get_with("/a", "Host: x\r\nHost: y\r\n"))), 400);
  EXPECT_EQ(status_of(roundtrip(s.port(), "GET /a HTTP/1.0\r\n\r\n")), 200);
  EXPECT_EQ(status_of(roundtrip(s.port(), get_with("/a", "Host: x\r\n"))), 200);
}

TEST(HttpTransport, ABlockingHandlerLearnsThatItsClientLeft) {
  std::atomic<int> seen{-1};
  Served s(opts(), [&](const HttpRequest&, HttpExchange& out) {
    const auto end = Clock::now() + std::chrono::seconds(30);
    while (!out.client_gone() && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    seen = out.client_gone() ? 1 : 0;
  });
  const int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::close(fd);
  for (auto end = Clock::now() + std::chrono::seconds(30); seen < 0 && Clock::now() < end;)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(seen, 1);
}

TEST(HttpTransport, AStreamLearnsThatItsClientLeft) {
  std::atomic<int> writes_ok{0}, failed{0};
  Served s(opts(), [&](const HttpRequest&, HttpExchange& out) {
    out.start_stream(200, {{"Content-Type", "text/event-stream"}});
    const auto end = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < end) {
      if (!out.write("data: x\n\n")) {
        failed = 1;
        return;
      }
      ++writes_ok;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  const int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, "GET /s HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_EQ(status_of(read_response(fd, std::chrono::seconds(30))), 200);
  ::close(fd);
  for (auto end = Clock::now() + std::chrono::seconds(30); !failed && Clock::now() < end;)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(failed, 1);
  EXPECT_GE(writes_ok, 0);
}

TEST(HttpTransport, EachLimitHasItsAnswer) {
  HttpTransportOptions o = opts();
  o.max_body_bytes = 1000;
  o.limits.head_timeout = std::chrono::milliseconds(300);
  o.limits.max_header_count = 10;
  std::vector<int> statuses;
  std::mutex mu;
  o.on_response = [&](int st) {
    std::lock_guard<std::mutex> lk(mu);
    statuses.push_back(st);
  };
  Served s(o, [](const HttpRequest& q, HttpExchange& out) {
    if (q.path == "/throw") throw std::runtime_error("boom");
    if (q.path == "/silent") return;
    echo(q, out);
  });
  const int p = s.port();
  // A head that never ends: 408, then the close.
  {
    const int fd = connect_to(p);
    send_all(fd, "GET / HTTP/1.1\r\nHost: x\r\n");
    const std::string r = read_until_close(fd);
    EXPECT_EQ(status_of(r), 408) << r;
    ::close(fd);
  }
  // A body over the limit, sent whole by a client that reads only afterwards: 413, not a reset.
  const std::string big(200000, 'b');
  EXPECT_EQ(status_of(roundtrip(p, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(big.size()) +
                                      "\r\n\r\n" + big)),
            413);
  // Chunked, over the limit as it arrives.
  EXPECT_EQ(status_of(roundtrip(p, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4e20\r\n" +
                                      std::string(20000, 'c') + "\r\n0\r\n\r\n")),
            413);
  std::string fields = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 11; ++i) fields += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(status_of(roundtrip(p, fields + "\r\n")), 431);
  EXPECT_EQ(status_of(roundtrip(p, "GET / HTTP/1.1\r\nX: " + std::string(20000, 'h') + "\r\n\r\n")), 431);
  EXPECT_EQ(status_of(roundtrip(p, "NOT HTTP AT ALL\r\n\r\n")), 400);
  const std::string thrown = roundtrip(p, get_with("/throw", "Host: x\r\n"));
  EXPECT_EQ(status_of(thrown), 500);
  EXPECT_NE(thrown.find("boom"), std::string::npos) << thrown;
  EXPECT_EQ(status_of(roundtrip(p, get_with("/silent", "Host: x\r\n"))), 500);
  // HEAD: the GET's Content-Length, no body.
  const std::string head = roundtrip(p, "HEAD /h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_of(head), 200) << head;
  EXPECT_NE(head.find("Content-Length: 15"), std::string::npos) << head;
  EXPECT_EQ(body_text(head), "");
  // 100-continue: the body is sent once the server asks for it.
  {
    const int fd = connect_to(p);
    send_all(fd, "POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\nConnection: close\r\n\r\n");
    std::string got;
    char buf[256];
    for (auto end = Clock::now() + std::chrono::seconds(30); got.find("\r\n\r\n") == std::string::npos && Clock::now() < end;) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      got.append(buf, size_t(n));
    }
    EXPECT_EQ(status_of(got), 100) << got;
    send_all(fd, "ok");
    const std::string r = read_until_close(fd);
    EXPECT_EQ(body_text(r), "POST /e ok host=x") << r;
    ::close(fd);
  }
  std::lock_guard<std::mutex> lk(mu);
  for (int st : {408, 413, 431, 400, 500, 200})
    EXPECT_NE(std::find(statuses.begin(), statuses.end(), st), statuses.end()) << st;
}

TEST(HttpTransport, IdleConnectionsAreClosed) {
  HttpTransportOptions o = opts();
  o.limits.idle_timeout = std::chrono::milliseconds(200);
  Served s(o, echo);
  const int fd = connect_to(s.port());
  EXPECT_EQ(read_until_close(fd), "");  // closed without a word (bound: 30 s)
  ::close(fd);
  for (auto end = Clock::now() + std::chrono::seconds(30); s.transport().connections() && Clock::now() < end;)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(s.transport().connections(), 0);
}

TEST(HttpTransport, StopLetsAnAnswerInProgressFinish) {
  std::atomic<bool> in_handler{false};
  auto s = std::make_unique<Served>(opts(), [&](const HttpRequest& q, HttpExchange& out) {
    in_handler = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    echo(q, out);
  });
  const int fd = connect_to(s->port());
  const int idle = connect_to(s->port());
  send_all(fd, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
  for (auto end = Clock::now() + std::chrono::seconds(30); !in_handler && Clock::now() < end;)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  std::thread stopper([&] { s.reset(); });
  const std::string r = read_until_close(fd);
  stopper.join();
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_NE(r.find("Connection: close"), std::string::npos) << r;
  EXPECT_EQ(read_until_close(idle), "");
  ::close(fd);
  ::close(idle);
}
