#include "server/dp_proxy.h"

#include <httplib.h>  // the client side, to the replicas

#include <atomic>
#include <chrono>
#include <thread>
#include <nlohmann/json.hpp>

#include "core/error.h"

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
}  // namespace

std::vector<int32_t> routing_units(const std::string& body) {
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
    const int r = router.pick(units);
    ++routed[r];
    // The client's key goes on to replicas that check their own (remote `serve --api-key`).
    const std::string auth = req.header("Authorization");
    if (!stream) {
      auto c = client(r);
      httplib::Headers h;
      if (!auth.empty()) h.emplace("Authorization", auth);
      // A client that leaves: the upstream connection is shut (Client::stop),
      // which the replica takes as its client leaving (its request is aborted).
      std::atomic<bool> answered{false};
      std::thread watch([&] {
        while (!answered) {
          if (out.client_gone()) c->stop();
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      });
      auto up = c->Post(req.path, h, req.body, "application/json");
      answered = true;
      watch.join();
      router.done(r);
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
    // Streamed: relay the replica's SSE bytes as they arrive; a client that
    // goes away closes the replica's connection, which cancels its requests.
    if (out.start_stream(200, {{"Content-Type", "text/event-stream"}, {"X-Mxserve-Replica", std::to_string(r)}})) {
      auto c = client(r);
      httplib::Request up;
      up.method = "POST";
      up.path = req.path;
      up.body = req.body;
      up.set_header("Content-Type", "application/json");
      if (!auth.empty()) up.set_header("Authorization", auth);
      bool client_ok = true;
      up.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
        return client_ok = out.write(std::string_view(d, n));
      };
      httplib::Response ur;
      httplib::Error err = httplib::Error::Success;
      if (!c->send(up, ur, err) && client_ok) {
        const std::string msg =
            "data: " + json{{"error", {{"message", "replica unreachable"}, {"type", "server_error"}}}}.dump() + "\n\n";
        out.write(msg);
      }
      if (client_ok) out.end_stream();
    }
    router.done(r);
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

RouterServer::RouterServer(RouterServerOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {
  MX_CHECK(!impl_->opts.replicas.empty(), "the router needs at least one --replica URL");
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
