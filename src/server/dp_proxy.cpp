#include "server/dp_proxy.h"

#include <httplib.h>

#include <atomic>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace mx::server {

using nlohmann::json;

namespace {
void append_bytes(std::vector<int32_t>& u, const std::string& s) {
  for (unsigned char c : s) u.push_back(c);
}

void error_json(httplib::Response& res, int status, const std::string& msg, const char* type) {
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
  httplib::Server http;
  int port = -1;

  std::unique_ptr<httplib::Client> client(int r) const {
    auto c = std::make_unique<httplib::Client>(opts.replicas[r]);
    c->set_read_timeout(opts.timeout_seconds, 0);
    c->set_connection_timeout(10, 0);
    return c;
  }

  void forward(const httplib::Request& req, httplib::Response& res) {
    std::vector<int32_t> units;
    bool stream = false;
    try {
      units = routing_units(req.body);
      json j = json::parse(req.body);
      stream = j.contains("stream") && j["stream"] == true;
    } catch (const std::exception& e) {
      return error_json(res, 400, e.what(), "invalid_request_error");
    }
    const int r = router.pick(units);
    ++routed[r];
    res.set_header("X-Mxserve-Replica", std::to_string(r));
    // The client's key goes on to replicas that check their own (remote `serve --api-key`).
    const std::string auth = req.get_header_value("Authorization");
    if (!stream) {
      auto c = client(r);
      httplib::Headers h;
      if (!auth.empty()) h.emplace("Authorization", auth);
      auto up = c->Post(req.path, h, req.body, "application/json");
      router.done(r);
      if (!up) return error_json(res, 502, "replica " + opts.replicas[r] + " unreachable: " + httplib::to_string(up.error()), "server_error");
      res.status = up->status;
      res.set_content(up->body, up->get_header_value("Content-Type").empty() ? "application/json"
                                                                              : up->get_header_value("Content-Type"));
      return;
    }
    // Streamed: relay the replica's SSE bytes as they arrive.
    const std::string path = req.path, body = req.body;
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, r, path, body, auth](size_t, httplib::DataSink& sink) {
          auto c = client(r);
          httplib::Request up;
          up.method = "POST";
          up.path = path;
          up.body = body;
          up.set_header("Content-Type", "application/json");
          if (!auth.empty()) up.set_header("Authorization", auth);
          up.content_receiver = [&sink](const char* d, size_t n, uint64_t, uint64_t) { return sink.write(d, n); };
          httplib::Response ur;
          httplib::Error err = httplib::Error::Success;
          if (!c->send(up, ur, err)) {
            const std::string msg = "data: " + json{{"error", {{"message", "replica unreachable"}, {"type", "server_error"}}}}.dump() + "\n\n";
            sink.write(msg.data(), msg.size());
          }
          sink.done();
          return true;
        },
        [this, r](bool) { router.done(r); });
  }
};

RouterServer::RouterServer(RouterServerOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {
  MX_CHECK(!impl_->opts.replicas.empty(), "the router needs at least one --replica URL");
  Impl* I = impl_.get();
  const int threads = I->opts.http_threads;
  I->http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  auto fwd = [I](const httplib::Request& q, httplib::Response& s) { I->forward(q, s); };
  I->http.set_pre_routing_handler([I](const httplib::Request& q, httplib::Response& s) {
    static const std::vector<Route> routes = {{"POST", "/v1/completions"}, {"POST", "/v1/chat/completions"},
                                              {"GET", "/v1/models"}, {"GET", "/health"}, {"GET", "/router/stats"}};
    return reject_request(q, s, I->opts.access, routes) ? httplib::Server::HandlerResponse::Handled
                                                        : httplib::Server::HandlerResponse::Unhandled;
  });
  I->http.Post("/v1/completions", fwd);
  I->http.Post("/v1/chat/completions", fwd);
  I->http.Get("/v1/models", [I](const httplib::Request&, httplib::Response& s) {
    auto up = I->client(0)->Get("/v1/models");
    if (!up) return error_json(s, 502, "replica 0 unreachable", "server_error");
    s.status = up->status;
    s.set_content(up->body, "application/json");
  });
  I->http.Get("/health", [I](const httplib::Request&, httplib::Response& s) {
    for (size_t r = 0; r < I->opts.replicas.size(); ++r) {
      auto up = I->client(int(r))->Get("/health");
      if (!up || up->status != 200) return error_json(s, 503, "replica " + I->opts.replicas[r] + " is not healthy", "server_error");
    }
    s.set_content("{\"status\":\"ok\"}", "application/json");
  });
  I->http.Get("/router/stats", [I](const httplib::Request&, httplib::Response& s) {
    json a = json::array();
    for (size_t r = 0; r < I->opts.replicas.size(); ++r)
      a.push_back({{"url", I->opts.replicas[r]}, {"routed", I->routed[r].load()}, {"in_flight", I->router.in_flight(int(r))}});
    s.set_content(json{{"replicas", a}, {"policy", I->opts.route.cache_aware ? "cache-aware" : "round-robin"}}.dump(),
                  "application/json");
  });
}

RouterServer::~RouterServer() { shutdown(); }

int RouterServer::bind() {
  Impl* I = impl_.get();
  I->port = I->opts.port == 0 ? I->http.bind_to_any_port(I->opts.host) : (I->http.bind_to_port(I->opts.host, I->opts.port) ? I->opts.port : -1);
  MX_CHECK(I->port > 0, "cannot listen on {}:{}", I->opts.host, I->opts.port);
  return I->port;
}

void RouterServer::run() { impl_->http.listen_after_bind(); }
void RouterServer::shutdown() { impl_->http.stop(); }
int RouterServer::port() const { return impl_->port; }

std::vector<uint64_t> RouterServer::routed() const {
  std::vector<uint64_t> v;
  for (size_t r = 0; r < impl_->opts.replicas.size(); ++r) v.push_back(impl_->routed[r].load());
  return v;
}

}  // namespace mx::server
