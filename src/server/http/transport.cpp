// Boost.Beast / Asio implementation of http/transport.h. The connection's
// life (one Session per socket, all its socket work on its strand):
//   Idle   async_wait(wait_read) under idle_timeout (skipped when pipelined
//          bytes are already buffered)
//   Head   http::async_read_header under head_timeout, then the field count
//   Body   http::async_read under body_timeout (after "100 Continue" if asked)
//   Handle the handler on a worker thread; the socket is watched for the
//          client's FIN meanwhile; its response or stream chunks are written
//          here, each under write_timeout
//   then Idle again (keep-alive), or a close: lingering after an error answer.
// The read side follows Beast's http_server_async example
// (libs/beast/example/http/server/async) with a parser object per request so
// that header_limit / body_limit can be set (docs: "Parser Stream Operations").
#include "server/http/transport.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <future>
#include <list>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace mx::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

// "%2F" -> "/" (as cpp-httplib gave paths to its routes); a bad escape stays as it is.
std::string percent_decoded(const std::string& s) {
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += char(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

const HttpHeaders::value_type* find_header(const HttpHeaders& h, std::string_view name) {
  for (const auto& kv : h)
    if (iequals(kv.first, name)) return &kv;
  return nullptr;
}

// Handler threads: a fixed number, fed from one queue. The queue holds at most
// one task per open connection (max_connections bounds it).
class WorkerPool {
 public:
  void start(int n) {
    for (int i = 0; i < std::max(1, n); ++i) threads_.emplace_back([this] { loop(); });
  }
  void post(std::function<void()> f) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      q_.push_back(std::move(f));
    }
    cv_.notify_one();
  }
  // Runs what is queued, then joins.
  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
        if (q_.empty()) return;
        f = std::move(q_.front());
        q_.pop_front();
      }
      f();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

class Session;

struct Core : std::enable_shared_from_this<Core> {
  HttpTransportOptions opts;
  HttpHandler handler;
  net::io_context ioc;
  net::strand<net::io_context::executor_type> accept_strand = net::make_strand(ioc);
  tcp::acceptor acceptor{accept_strand};
  net::steady_timer accept_retry{accept_strand};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work{ioc.get_executor()};
  WorkerPool pool;
  bool pool_started = false;
  std::atomic<int> nconn{0};
  std::atomic<bool> stopping{false};
  std::mutex sess_mu;
  std::list<std::weak_ptr<Session>> sessions;
  std::mutex stop_mu;
  bool stopped = false;
  int port = -1;

  Core(HttpTransportOptions o, HttpHandler h) : opts(std::move(o)), handler(std::move(h)) {
    if (!opts.error_body)
      opts.error_body = [](int, const std::string& m) { return "{\"error\":\"" + m + "\"}"; };
  }

  // An answer of the transport's own, as HTTP/1.1 text (for the non-blocking sends).
  std::string error_text(int status, const std::string& msg) const {
    http::response<http::string_body> r{http::status(unsigned(status)), 11};
    r.set(http::field::content_type, "application/json");
    r.keep_alive(false);
    r.body() = opts.error_body(status, msg);
    r.prepare_payload();
    std::ostringstream os;
    os << r;
    return os.str();
  }
  void counted(int status) {
    if (opts.on_response) opts.on_response(status);
  }
  void do_accept();
  void on_accept(beast::error_code ec, tcp::socket s);
};

// One connection. HttpExchange for its current request's handler.
class Session : public std::enable_shared_from_this<Session>, public HttpExchange {
 public:
  Session(std::shared_ptr<Core> core, tcp::socket s) : core_(std::move(core)), sock_(std::move(s)), timer_(sock_.get_executor()) {
    beast::error_code ec;
    auto ep = sock_.remote_endpoint(ec);
    if (!ec) peer_ = ep.address().to_string() + ":" + std::to_string(ep.port());
  }
  ~Session() override {
    unregister();
    --core_->nconn;
  }

  void start() {
    {
      std::lock_guard<std::mutex> lk(core_->sess_mu);
      core_->sessions.push_back(weak_from_this());
      self_it_ = std::prev(core_->sessions.end());
      registered_ = true;
    }
    net::dispatch(sock_.get_executor(), [self = shared_from_this()] { self->wait_idle(); });
  }
  void unregister() {
    std::lock_guard<std::mutex> lk(core_->sess_mu);
    if (registered_) core_->sessions.erase(self_it_);
    registered_ = false;
  }

  // From stop(): close what is not being answered; answers finish, then close.
  void on_stop(bool force) {
    stop_requested_ = true;
    if (force || phase_ == Phase::Idle || phase_ == Phase::Head || phase_ == Phase::Body) close_now();
  }
  tcp::socket::executor_type executor() { return sock_.get_executor(); }

  // ---------------------------------------------------------------- HttpExchange (worker thread)

  bool respond(HttpResponse res) override {
    if (answered_.exchange(true)) return false;
    auto msg = std::make_shared<http::response<http::string_body>>(http::status(unsigned(res.status)), version_);
    for (auto& [k, v] : res.headers) msg->insert(k, v);
    msg->body() = std::move(res.body);
    msg->keep_alive(keep_alive_ && !core_->stopping);  // stopping: this answer is the connection's last
    msg->prepare_payload();
    if (head_request_) msg->body().clear();  // Content-Length stays the GET's
    net::post(sock_.get_executor(), [self = shared_from_this(), msg, status = res.status] {
      self->write_whole(msg, status);
    });
    return !gone_;
  }

  bool start_stream(int status, HttpHeaders headers) override {
    if (answered_.exchange(true)) return false;
    streaming_ = true;
    auto h = std::make_shared<StreamHead>();
    h->res = http::response<http::empty_body>(http::status(unsigned(status)), version_);
    for (auto& [k, v] : headers) h->res.insert(k, v);
    if (!chunked()) keep_alive_ = false;  // the close ends the body
    h->res.keep_alive(keep_alive_ && !core_->stopping);
    h->res.chunked(chunked());
    h->sr.emplace(h->res);
    return blocking([this, h, status](std::promise<bool>& p) {
      arm(core_->opts.limits.write_timeout, Phase::Handle);
      http::async_write_header(sock_, *h->sr,
                               [self = shared_from_this(), h, status, &p](beast::error_code ec, size_t) {
                                 self->disarm();
                                 if (!ec) self->core_->counted(status);
                                 p.set_value(self->wrote(ec));
                               });
    });
  }

  bool write(std::string_view data) override {
    if (!streaming_ || ended_) return false;
    if (data.empty()) return !gone_;  // an empty chunk would end the stream
    auto s = std::make_shared<std::string>(data);
    return blocking([this, s](std::promise<bool>& p) {
      arm(core_->opts.limits.write_timeout, Phase::Handle);
      auto done = [self = shared_from_this(), s, &p](beast::error_code ec, size_t) {
        self->disarm();
        p.set_value(self->wrote(ec));
      };
      if (chunked())
        net::async_write(sock_, http::make_chunk(net::buffer(*s)), std::move(done));
      else
        net::async_write(sock_, net::buffer(*s), std::move(done));
    });
  }

  bool end_stream() override {
    if (!streaming_ || ended_) return false;
    ended_ = true;
    if (!chunked())  // nothing to write: the close that follows ends the body
      return blocking([this](std::promise<bool>& p) {
        response_done_ = true;
        p.set_value(true);
      });
    return blocking([this](std::promise<bool>& p) {
      arm(core_->opts.limits.write_timeout, Phase::Handle);
      net::async_write(sock_, http::make_chunk_last(), [self = shared_from_this(), &p](beast::error_code ec, size_t) {
        self->disarm();
        const bool ok = self->wrote(ec);
        if (ok) self->response_done_ = true;
        p.set_value(ok);
      });
    });
  }

  bool client_gone() const override { return gone_; }

 private:
  enum class Phase { Idle, Head, Body, Handle, Linger, Closed };
  struct StreamHead {
    http::response<http::empty_body> res;
    std::optional<http::response_serializer<http::empty_body>> sr;
  };

  // Runs op on the strand and waits for the promise it is given to be set.
  bool blocking(const std::function<void(std::promise<bool>&)>& op) {
    if (gone_) return false;
    std::promise<bool> p;
    auto f = p.get_future();
    net::post(sock_.get_executor(), [self = shared_from_this(), &op, &p] {
      if (self->phase_ == Phase::Closed)
        p.set_value(false);
      else
        op(p);
    });
    return f.get();
  }
  bool wrote(const beast::error_code& ec) {
    if (!ec) return true;
    gone_ = true;
    close_now();
    return false;
  }

  // ---------------------------------------------------------------- timers (strand)

  void arm(std::chrono::milliseconds d, Phase for_phase) {
    const uint64_t g = ++timer_gen_;
    timer_.expires_after(d);
    timer_.async_wait([self = shared_from_this(), g, for_phase](beast::error_code ec) {
      if (ec || g != self->timer_gen_) return;
      self->on_timeout(for_phase);
    });
  }
  void disarm() {
    ++timer_gen_;
    timer_.cancel();
  }
  void on_timeout(Phase p) {
    if (phase_ == Phase::Closed) return;
    if (p == Phase::Head || p == Phase::Body) {
      const char* what = p == Phase::Head ? "request head" : "request body";
      const auto limit = p == Phase::Head ? core_->opts.limits.head_timeout : core_->opts.limits.body_timeout;
      send_now(408, std::string("the ") + what + " did not arrive within " + std::to_string(limit.count()) + " ms");
    }
    if (p == Phase::Handle) gone_ = true;  // the client does not read what it asked for
    close_now();
  }

  // One non-blocking send of a small answer, for clients that may not read.
  void send_now(int status, const std::string& msg) {
    const std::string t = core_->error_text(status, msg);
    if (::send(sock_.native_handle(), t.data(), t.size(), MSG_DONTWAIT | MSG_NOSIGNAL) > 0) core_->counted(status);
  }

  // reset: an RST instead of the FIN that would end a body running to the close.
  void close_now(bool reset = false) {
    if (phase_ == Phase::Closed) return;
    phase_ = Phase::Closed;
    gone_ = true;
    disarm();
    beast::error_code ec;
    if (reset)
      sock_.set_option(net::socket_base::linger(true, 0), ec);
    else
      sock_.shutdown(tcp::socket::shutdown_both, ec);
    sock_.close(ec);
    unregister();
  }

  // ---------------------------------------------------------------- reading (strand)

  void wait_idle() {
    if (stop_requested_ || core_->stopping || phase_ == Phase::Closed) return close_now();
    phase_ = Phase::Idle;
    if (buf_.size() > 0) return read_head();  // a pipelined request is already here
    arm(core_->opts.limits.idle_timeout, Phase::Idle);
    sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
      if (self->phase_ != Phase::Idle) return;
      if (ec) return self->close_now();
      self->read_head();
    });
  }

  void read_head() {
    phase_ = Phase::Head;
    parser_.emplace();
    parser_->header_limit(uint32_t(std::min<size_t>(core_->opts.limits.max_header_bytes, UINT32_MAX)));
    parser_->body_limit(core_->opts.max_body_bytes);
    arm(core_->opts.limits.head_timeout, Phase::Head);
    http::async_read_header(sock_, buf_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->on_head(ec);
    });
  }

  void on_head(beast::error_code ec) {
    if (phase_ != Phase::Head) return;
    if (ec) return read_failed(ec);
    const auto& m = parser_->get();
    const size_t fields = size_t(std::distance(m.begin(), m.end()));
    if (fields > size_t(core_->opts.limits.max_header_count))
      return answer_error(431, "the request has " + std::to_string(fields) + " header fields, over the limit of " +
                                   std::to_string(core_->opts.limits.max_header_count));
    // RFC 9112 section 3.2: an HTTP/1.1 request without Host, or with more than one, is a 400.
    const auto hosts = m.count(http::field::host);
    if (hosts > 1 || (hosts == 0 && m.version() >= 11))
      return answer_error(400, hosts > 1 ? "the request has more than one Host header"
                                         : "an HTTP/1.1 request must have a Host header");
    phase_ = Phase::Body;
    arm(core_->opts.limits.body_timeout, Phase::Body);
    if (parser_->is_done()) return on_body({});
    auto it = m.find(http::field::expect);
    if (it != m.end() && iequals(it->value(), "100-continue")) {
      static const std::string cont = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(sock_, net::buffer(cont), [self = shared_from_this()](beast::error_code ec, size_t) {
        if (self->phase_ != Phase::Body) return;
        if (ec) return self->close_now();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(sock_, buf_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (self->phase_ != Phase::Body) return;
      self->on_body(ec);
    });
  }

  void read_failed(beast::error_code ec) {
    if (ec == http::error::header_limit)
      return answer_error(431, "the request head is over the limit of " +
                                   std::to_string(core_->opts.limits.max_header_bytes) + " bytes");
    if (ec == http::error::body_limit)
      return answer_error(413, "the request body exceeds the limit of " + std::to_string(core_->opts.max_body_bytes) +
                                   " bytes");
    if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message)
      return answer_error(400, "malformed request: " + ec.message());
    close_now();  // the client closed, reset, or a deadline closed the socket
  }

  void on_body(beast::error_code ec) {
    if (ec) return read_failed(ec);
    disarm();
    auto msg = parser_->release();
    parser_.reset();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    req.path = percent_decoded(req.target.substr(0, req.target.find('?')));
    for (const auto& f : msg) req.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    req.body = std::move(msg.body());
    req.peer = peer_;
    keep_alive_ = msg.keep_alive();
    version_ = msg.version();
    head_request_ = msg.method() == http::verb::head;
    answered_ = false;
    streaming_ = ended_ = response_done_ = false;
    gone_ = false;
    handler_running_ = true;
    phase_ = Phase::Handle;
    watch(++request_gen_);
    core_->pool.post([self = shared_from_this(), req = std::move(req)] { self->run_handler(req); });
  }

  // The client's FIN while its request is handled: client_gone().
  void watch(uint64_t gen) {
    sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this(), gen](beast::error_code ec) {
      if (gen != self->request_gen_ || self->phase_ != Phase::Handle || !self->handler_running_) return;
      if (ec) {
        if (ec != net::error::operation_aborted) self->gone_ = true;
        return;
      }
      char c;
      const ssize_t n = ::recv(self->sock_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0) {
        self->gone_ = true;  // EOF
      } else if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
          self->watch(gen);
        else
          self->gone_ = true;
      }
      // n > 0: a pipelined request; it is read after this one is answered.
    });
  }

  // ---------------------------------------------------------------- handling (worker thread)

  void run_handler(const HttpRequest& req) {
    try {
      core_->handler(req, *this);
      if (!answered_ && !gone_) respond(error_response(500, "the request got no answer"));
    } catch (const std::exception& e) {
      if (!answered_) respond(error_response(500, std::string("internal error: ") + e.what()));
    } catch (...) {
      if (!answered_) respond(error_response(500, "internal error"));
    }
    net::post(sock_.get_executor(), [self = shared_from_this()] { self->handler_done(); });
  }

  HttpResponse error_response(int status, const std::string& msg) const {
    HttpResponse r;
    r.status = status;
    r.set_content(core_->opts.error_body(status, msg), "application/json");
    return r;
  }

  // ---------------------------------------------------------------- writing (strand)

  void write_whole(std::shared_ptr<http::response<http::string_body>> msg, int status) {
    if (phase_ == Phase::Closed) return;
    arm(core_->opts.limits.write_timeout, Phase::Handle);
    http::async_write(sock_, *msg, [self = shared_from_this(), msg, status](beast::error_code ec, size_t) {
      self->disarm();
      if (!self->wrote(ec)) return;
      self->core_->counted(status);
      self->response_done_ = true;
      self->next();
    });
  }

  void handler_done() {
    handler_running_ = false;
    // A stream cut short: the client must see it broken (HTTP/1.0's has no last chunk to miss).
    if (streaming_ && !response_done_) return close_now(/*reset=*/!chunked());
    next();
  }

  // After a request: the next one on this connection, or the close.
  void next() {
    if (handler_running_ || !response_done_ || phase_ != Phase::Handle) return;
    ++request_gen_;  // the watcher of the last request stands down
    beast::error_code ec;
    sock_.cancel(ec);
    if (!keep_alive_ || stop_requested_ || gone_ || core_->stopping) return close_now();
    wait_idle();
  }

  // An error answer, then a lingering close: our side shut, the client's
  // remaining upload read and dropped (up to 2 s), so it can read the answer.
  void answer_error(int status, const std::string& message) {
    phase_ = Phase::Linger;
    auto msg = std::make_shared<http::response<http::string_body>>(http::status(unsigned(status)), 11);
    msg->set(http::field::content_type, "application/json");
    msg->keep_alive(false);
    msg->body() = core_->opts.error_body(status, message);
    msg->prepare_payload();
    arm(core_->opts.limits.write_timeout, Phase::Linger);
    http::async_write(sock_, *msg, [self = shared_from_this(), msg, status](beast::error_code ec, size_t) {
      if (self->phase_ != Phase::Linger) return;
      if (ec) return self->close_now();
      self->core_->counted(status);
      beast::error_code e2;
      self->sock_.shutdown(tcp::socket::shutdown_send, e2);
      self->arm(std::chrono::seconds(2), Phase::Linger);
      self->drain();
    });
  }
  void drain() {
    if (!scratch_) scratch_ = std::make_unique<std::array<char, 16384>>();
    sock_.async_read_some(net::buffer(*scratch_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (self->phase_ != Phase::Linger) return;
      if (ec) return self->close_now();
      self->drain();
    });
  }

  std::shared_ptr<Core> core_;
  tcp::socket sock_;
  net::steady_timer timer_;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::unique_ptr<std::array<char, 16384>> scratch_;
  std::string peer_;
  std::list<std::weak_ptr<Session>>::iterator self_it_;
  bool registered_ = false;  // guarded by core_->sess_mu
  // Strand state.
  Phase phase_ = Phase::Idle;
  uint64_t timer_gen_ = 0, request_gen_ = 0;
  bool stop_requested_ = false, handler_running_ = false, response_done_ = false;
  // Set on the strand before the handler is posted, read by the worker; keep_alive_
  // also set by the worker in start_stream, before the blocking write that orders it
  // before the strand's next read (next(), after the handler).
  bool keep_alive_ = true, head_request_ = false;
  unsigned version_ = 11;
  // A stream's body in chunks (HTTP/1.1), or up to the close: HTTP/1.0 has no chunked
  // coding (RFC 9112 section 6.1).
  bool chunked() const { return version_ >= 11; }
  // Worker side (streaming_ / ended_ only by the handler's thread).
  bool streaming_ = false, ended_ = false;
  std::atomic<bool> answered_{false}, gone_{false};
};

void Core::do_accept() {
  acceptor.async_accept(net::make_strand(ioc), [self = shared_from_this()](beast::error_code ec, tcp::socket s) {
    self->on_accept(ec, std::move(s));
  });
}

void Core::on_accept(beast::error_code ec, tcp::socket s) {
  if (ec == net::error::operation_aborted || !acceptor.is_open() || stopping) return;
  if (ec) {
    // E.g. EMFILE: try again shortly instead of spinning on the same error.
    accept_retry.expires_after(std::chrono::milliseconds(50));
    accept_retry.async_wait([self = shared_from_this()](beast::error_code e) {
      if (!e) self->do_accept();
    });
    return;
  }
  beast::error_code e2;
  s.set_option(tcp::no_delay(true), e2);
  if (nconn.fetch_add(1) >= opts.limits.max_connections) {
    --nconn;
    const std::string t = error_text(503, "the server has " + std::to_string(opts.limits.max_connections) +
                                              " connections open, its limit; retry later");
    if (::send(s.native_handle(), t.data(), t.size(), MSG_DONTWAIT | MSG_NOSIGNAL) > 0) counted(503);
    s.shutdown(tcp::socket::shutdown_both, e2);
    s.close(e2);
  } else {
    std::make_shared<Session>(shared_from_this(), std::move(s))->start();
  }
  do_accept();
}

}  // namespace

struct HttpTransport::Impl {
  std::shared_ptr<Core> core;
  std::vector<std::thread> io;
};

HttpTransport::HttpTransport(HttpTransportOptions opts, HttpHandler handler) : impl_(std::make_shared<Impl>()) {
  impl_->core = std::make_shared<Core>(std::move(opts), std::move(handler));
}

HttpTransport::~HttpTransport() {
  stop(std::chrono::milliseconds(0));
  // Completes what stop() left queued (every socket is closed by now, so each
  // operation ends at once), releasing the sessions and their hold on Core.
  // run() has returned: its caller waits for that before destroying us.
  Core& c = *impl_->core;
  c.ioc.restart();
  c.ioc.run_for(std::chrono::seconds(5));
}

int HttpTransport::bind() {
  Core& c = *impl_->core;
  beast::error_code ec;
  net::ip::address addr;
  if (c.opts.host == "localhost") {
    addr = net::ip::make_address("127.0.0.1");
  } else {
    addr = net::ip::make_address(c.opts.host, ec);
    if (ec) {  // a name: its first address
      tcp::resolver res(c.ioc);
      auto r = res.resolve(c.opts.host, "", ec);
      MX_CHECK(!ec && !r.empty(), "cannot listen on {}: {}", c.opts.host, ec ? ec.message() : "no address");
      addr = r.begin()->endpoint().address();
    }
  }
  const tcp::endpoint ep(addr, uint16_t(c.opts.port));
  c.acceptor.open(ep.protocol(), ec);
  if (!ec) c.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) c.acceptor.bind(ep, ec);
  if (!ec) c.acceptor.listen(net::socket_base::max_listen_connections, ec);  // SOMAXCONN
  MX_CHECK(!ec, "cannot listen on {}:{} ({})", c.opts.host, c.opts.port, ec.message());
  c.port = c.acceptor.local_endpoint().port();
  // Every connection is a descriptor: raise the soft limit (often 1024) toward
  // the hard one so that max_connections can be reached, as Go's runtime and
  // nginx's worker_rlimit_nofile do. Beyond it accept fails (EMFILE) and is retried.
  rlimit r{};
  const rlim_t want = rlim_t(c.opts.limits.max_connections) + 256;
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY && r.rlim_cur < want) {
    r.rlim_cur = r.rlim_max == RLIM_INFINITY ? want : std::min(want, r.rlim_max);
    setrlimit(RLIMIT_NOFILE, &r);
  }
  if (!c.pool_started) {
    c.pool.start(c.opts.workers);
    c.pool_started = true;
  }
  c.do_accept();
  return c.port;
}

void HttpTransport::run() {
  std::shared_ptr<Core> c = impl_->core;
  {
    std::lock_guard<std::mutex> lk(c->stop_mu);
    if (c->stopped) return;
  }
  auto loop = [c] {
    for (;;) {
      try {
        c->ioc.run();
        return;
      } catch (const std::exception& e) {  // a handler threw on an io thread: log, keep serving
        std::fprintf(stderr, "mxserve: http io: %s\n", e.what());
      }
    }
  };
  std::vector<std::thread> more;
  for (int i = 1; i < c->opts.limits.io_threads; ++i) more.emplace_back(loop);
  loop();
  for (auto& t : more) t.join();
}

void HttpTransport::stop(std::chrono::milliseconds grace) {
  std::shared_ptr<Core> c = impl_->core;
  {
    std::lock_guard<std::mutex> lk(c->stop_mu);
    if (c->stopped) return;
    c->stopped = true;
  }
  c->stopping = true;
  net::post(c->accept_strand, [c] {
    beast::error_code ec;
    c->acceptor.close(ec);
    c->accept_retry.cancel();
  });
  auto each = [&](bool force) {
    std::vector<std::shared_ptr<Session>> live;
    {
      std::lock_guard<std::mutex> lk(c->sess_mu);
      for (auto& w : c->sessions)
        if (auto s = w.lock()) live.push_back(std::move(s));
    }
    for (auto& s : live) net::post(s->executor(), [s, force] { s->on_stop(force); });
  };
  each(false);
  const auto end = Clock::now() + grace;
  auto open = [&] {
    std::lock_guard<std::mutex> lk(c->sess_mu);
    return !c->sessions.empty();
  };
  while (open() && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  each(true);
  if (c->pool_started) c->pool.stop();  // handlers return: their sockets are closed
  c->work.reset();
  c->ioc.stop();
}

int HttpTransport::port() const { return impl_->core->port; }
int HttpTransport::connections() const { return impl_->core->nconn; }

std::string HttpRequest::header(std::string_view name) const {
  const auto* kv = find_header(headers, name);
  return kv ? kv->second : std::string();
}
bool HttpRequest::has_header(std::string_view name) const { return find_header(headers, name) != nullptr; }

void HttpResponse::set_header(std::string name, std::string value) {
  for (auto& kv : headers)
    if (iequals(kv.first, name)) {
      kv.second = std::move(value);
      return;
    }
  headers.emplace_back(std::move(name), std::move(value));
}
std::string HttpResponse::header(std::string_view name) const {
  const auto* kv = find_header(headers, name);
  return kv ? kv->second : std::string();
}

bool is_loopback_name(std::string_view s) {
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  if (iequals(s, "localhost") || s == "::1") return true;
  beast::error_code ec;
  auto a = net::ip::make_address(std::string(s), ec);
  if (ec) return false;
  return a.is_loopback();
}

}  // namespace mx::server
