#include "server/dp_proxy.h"

#include <httplib.h>  // the client side, to the replicas

#include <atomic>
#include <charconv>
#include <chrono>
#include <thread>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_depth.h"

namespace mx::server {

using nlohmann::json;

namespace {
void append_bytes(std::vector<int32_t>& u, const std::string& s) {
  for (unsigned char c : s) u.push_back(c);
}

void error_json(HttpResponse& res, int status, const std::string& msg, const char* type) {
  res.status = status;
  res.set_content(json{{"error", {{"message", msg}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}}.dump(),
                  "application/json");
}

// Shuts a replica's connection when the client goes away (Client::stop), which the replica
// takes as its client leaving (its requests are aborted); watches until destroyed.
class ClientWatch {
 public:
  ClientWatch(HttpExchange& out, httplib::Client& c)
      : t_([this, &out, &c] {
          while (!done_) {
            if (out.client_gone()) c.stop();
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
          }
        }) {}
  ~ClientWatch() {
    done_ = true;
    t_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread t_;
};

// The replica a request was given to, handed back once its answer is in (before the client is
// answered, so a client that asks /router/stats next sees it back), or however the forward ends.
struct Picked {
  PrefixRouter& router;
  int r;
  bool held = true;
  void release() {
    if (held) router.done(r);
    held = false;
  }
  ~Picked() { release(); }
};
}  // namespace

std::vector<int32_t> routing_units(const std::string& body) {
  // The parsed prompt is dumped below: 100,000 levels overflowed the router's stack (SIGSEGV).
  MX_CHECK(json_depth_at_most(body), "the request body nests arrays and objects more than {} deep", kMaxJsonDepth);
  json j = json::parse(body, nullptr, false);
  MX_CHECK(!j.is_discarded() && j.is_object(), "the request body is not a JSON object");
  std::vector<int32_t> u;
  if (j.contains("prompt")) {
    const json& p = j["prompt"];
    if (p.is_string()) {
      append_bytes(u, p.get<std::string>());
    } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
      for (const auto& t : p) u.push_back(t.is_number_integer() ? t.get<int32_t>() : -1);
    } else {
      append_bytes(u, p.dump());
    }
    return u;
  }
  MX_CHECK(j.contains("messages") && j["messages"].is_array(), "the request has neither \"prompt\" nor \"messages\"");
  for (const auto& m : j["messages"]) {
    if (!m.is_object()) continue;
    if (m.contains("role") && m["role"].is_string()) append_bytes(u, m["role"].get<std::string>());
    u.push_back(0);
    if (m.contains("content")) append_bytes(u, m["content"].is_string() ? m["content"].get<std::string>() : m["content"].dump());
    u.push_back(0);
  }
  return u;
}

struct RouterServer::Impl {
  explicit Impl(RouterServerOptions o) : opts(std::move(o)), router(int(opts.replicas.size()), opts.route) {
    routed = std::make_unique<std::atomic<uint64_t>[]>(opts.replicas.size());
  }
  RouterServerOptions opts;
  PrefixRouter router;
  std::unique_ptr<std::atomic<uint64_t>[]> routed;
  std::unique_ptr<HttpTransport> http;
  int port = -1;

  std::unique_ptr<httplib::Client> client(int r) const {
    auto c = std::make_unique<httplib::Client>(opts.replicas[r]);
    c->set_read_timeout(opts.timeout_seconds, 0);
    c->set_connection_timeout(10, 0);
    return c;
  }

  void forward(const HttpRequest& req, HttpExchange& out) {
    HttpResponse res;
    std::vector<int32_t> units;
    bool stream = false;
    try {
      units = routing_units(req.body);
      json j = json::parse(req.body);
      stream = j.contains("stream") && j["stream"] == true;
    } catch (const std::exception& e) {
      error_json(res, 400, e.what(), "invalid_request_error");
      out.respond(std::move(res));
      return;
    }
    Picked picked{router, router.pick(units)};
    const int r = picked.r;
    ++routed[r];
    // The client's key goes on to replicas that check their own (remote `serve --api-key`).
    const std::string auth = req.header("Authorization");
    auto c = client(r);
    if (!stream) {
      httplib::Headers h;
      if (!auth.empty()) h.emplace("Authorization", auth);
      httplib::Result up = [&] {
        const ClientWatch watch(out, *c);
        return c->Post(req.path, h, req.body, "application/json");
      }();
      picked.release();
      if (out.client_gone()) return;  // nobody to answer
      if (!up) {
        error_json(res, 502, "replica " + opts.replicas[r] + " unreachable: " + httplib::to_string(up.error()),
                   "server_error");
      } else {
        res.status = up->status;
        res.set_content(up->body, up->get_header_value("Content-Type").empty() ? "application/json"
                                                                                : up->get_header_value("Content-Type"));
      }
      res.set_header("X-Mxserve-Replica", std::to_string(r));
      out.respond(std::move(res));
      return;
    }
    // Streamed: the client's stream starts once the replica answers 200, then its SSE bytes
    // are relayed as they arrive; any other answer (a 400 for bad sampling parameters, a 5xx)
    // goes back as it is, and an unreachable replica is a 502 (the stream used to start with a
    // 200 first, and a 400's JSON went out as the stream's body). A client that goes away
    // closes the replica's connection, which cancels its requests.
    httplib::Request up;
    up.method = "POST";
    up.path = req.path;
    up.body = req.body;
    up.set_header("Content-Type", "application/json");
    if (!auth.empty()) up.set_header("Authorization", auth);
    bool started = false, client_ok = true;
    int status = 0;
    std::string ctype, body;
    up.response_handler = [&](const httplib::Response& head) {
      status = head.status;
      ctype = head.get_header_value("Content-Type");
      if (status != 200) return true;
      started = client_ok =
          out.start_stream(200, {{"Content-Type", "text/event-stream"}, {"X-Mxserve-Replica", std::to_string(r)}});
      return started;
    };
    up.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
      if (started) return client_ok = out.write(std::string_view(d, n));
      if (body.size() < (size_t(1) << 20)) body.append(d, n);  // an error's JSON
      return true;
    };
    httplib::Response ur;
    httplib::Error err = httplib::Error::Success;
    bool sent;
    {
      const ClientWatch watch(out, *c);
      sent = c->send(up, ur, err);
    }
    picked.release();
    if (started) {
      if (!sent && client_ok) {
        const std::string msg =
            "data: " + json{{"error", {{"message", "replica " + opts.replicas[r] + " stopped mid-stream"},
                                       {"type", "server_error"}}}}.dump() + "\n\n";
        out.write(msg);
      }
      if (client_ok) out.end_stream();
      return;
    }
    if (out.client_gone()) return;
    if (status == 0) {
      error_json(res, 502, "replica " + opts.replicas[r] + " unreachable: " + httplib::to_string(err), "server_error");
    } else {
      res.status = status;
      res.set_content(body, ctype.empty() ? "application/json" : ctype);
    }
    res.set_header("X-Mxserve-Replica", std::to_string(r));
    out.respond(std::move(res));
  }

  void route(const HttpRequest& q, HttpExchange& out) {
    static const std::vector<Route> routes = {{"POST", "/v1/completions"}, {"POST", "/v1/chat/completions"},
                                              {"GET", "/v1/models"}, {"GET", "/health"}, {"GET", "/router/stats"}};
    HttpResponse s;
    if (reject_request(q, s, opts.access, routes)) return void(out.respond(std::move(s)));
    const bool get = q.method == "GET" || q.method == "HEAD";
    if (q.method == "POST" && (q.path == "/v1/completions" || q.path == "/v1/chat/completions")) return forward(q, out);
    if (get && q.path == "/v1/models") {
      auto up = client(0)->Get("/v1/models");
      if (!up) {
        error_json(s, 502, "replica 0 unreachable", "server_error");
      } else {
        s.status = up->status;
        s.set_content(up->body, "application/json");
      }
    } else if (get && q.path == "/health") {
      s.set_content("{\"status\":\"ok\"}", "application/json");
      for (size_t r = 0; r < opts.replicas.size(); ++r) {
        auto up = client(int(r))->Get("/health");
        if (!up || up->status != 200) {
          error_json(s, 503, "replica " + opts.replicas[r] + " is not healthy", "server_error");
          break;
        }
      }
    } else if (get && q.path == "/router/stats") {
      json a = json::array();
      for (size_t r = 0; r < opts.replicas.size(); ++r)
        a.push_back({{"url", opts.replicas[r]}, {"routed", routed[r].load()}, {"in_flight", router.in_flight(int(r))}});
      s.set_content(json{{"replicas", a}, {"policy", opts.route.cache_aware ? "cache-aware" : "round-robin"}}.dump(),
                    "application/json");
    } else {
      error_json(s, 404, "no route for " + q.method + " " + q.path, "invalid_request_error");
    }
    out.respond(std::move(s));
  }
};

namespace {
// http(s)://HOST[:PORT][/]: what httplib's client takes whole (a path after it was dropped
// silently, another scheme threw on every request, a port past 65535 failed only then).
void check_replica_url(const std::string& url) {
  const auto fail_url = [&](const char* why) {
    fail("--replica '{}' is not a replica's base URL (http://HOST:PORT): {}", url, why);
  };
  std::string_view rest = url;
  if (rest.starts_with("http://")) rest.remove_prefix(7);
  else if (rest.starts_with("https://")) rest.remove_prefix(8);
  else fail_url("the scheme must be http:// or https://");
  if (rest.ends_with('/')) rest.remove_suffix(1);
  if (rest.empty()) fail_url("no host");
  if (rest.find('/') != std::string_view::npos) fail_url("a path after the host is not supported");
  const size_t colon = rest.rfind(':'), bracket = rest.rfind(']');
  if (colon == std::string_view::npos || (bracket != std::string_view::npos && colon < bracket)) return;
  const std::string_view port = rest.substr(colon + 1);
  int p = 0;
  const auto r = std::from_chars(port.data(), port.data() + port.size(), p);
  if (r.ec != std::errc() || r.ptr != port.data() + port.size() || p < 1 || p > 65535)
    fail_url("the port must be in [1, 65535]");
  if (colon == 0) fail_url("no host");
}
}  // namespace

RouterServer::RouterServer(RouterServerOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {
  MX_CHECK(!impl_->opts.replicas.empty(), "the router needs at least one --replica URL");
  for (const std::string& url : impl_->opts.replicas) check_replica_url(url);
  Impl* I = impl_.get();
  I->opts.access.check_host = is_loopback_host(I->opts.host);  // DNS rebinding (access.h)
  HttpTransportOptions t;
  t.host = I->opts.host;
  t.port = I->opts.port;
  t.workers = std::max(1, I->opts.http_threads);
  t.limits = I->opts.http_limits;
  t.error_body = [](int status, const std::string& msg) {
    return json{{"error", {{"message", msg}, {"type", status >= 500 ? "server_error" : "invalid_request_error"},
                           {"param", nullptr}, {"code", nullptr}}}}
        .dump();
  };
  I->http = std::make_unique<HttpTransport>(std::move(t), [I](const HttpRequest& q, HttpExchange& out) { I->route(q, out); });
}

RouterServer::~RouterServer() { shutdown(); }

int RouterServer::bind() {
  impl_->port = impl_->http->bind();  // mx::Error when it cannot
  return impl_->port;
}

void RouterServer::run() { impl_->http->run(); }
void RouterServer::shutdown() { impl_->http->stop(); }
int RouterServer::port() const { return impl_->port; }

std::vector<uint64_t> RouterServer::routed() const {
  std::vector<uint64_t> v;
  for (size_t r = 0; r < impl_->opts.replicas.size(); ++r) v.push_back(impl_->routed[r].load());
  return v;
}

}  // namespace mx::server
