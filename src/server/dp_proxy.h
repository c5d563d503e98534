#pragma once
// The data-parallel HTTP router (`mxserve route`): one OpenAI-compatible
// endpoint in front of M separate `mxserve serve` processes (any hosts). Each
// generation request goes to the replica chosen by parallel/dp_router.h's
// PrefixRouter (longest block-aligned prompt prefix already sent there,
// balanced against requests in flight), and is forwarded unchanged; streamed
// responses are relayed chunk by chunk. A prompt's routing units are its token
// ids when it is given as ids, else the UTF-8 bytes of the prompt (or of the
// chat messages' roles and contents, in order).
//
// Routes: POST /v1/completions, /v1/chat/completions (forwarded), GET
// /v1/models (from the first replica), /health (200 when every replica
// answers), /router/stats (JSON: per replica URL, requests routed, in flight).
// Bad JSON is a 400; a replica that cannot be reached is a 502.
// Transport: the server side is http/transport.h (as `serve`: limits,
// deadlines, Host check on loopback); the client side, one blocking request
// per forwarded request on the handler's thread, stays cpp-httplib's Client
// (a blocking client on a handler thread is what it is good at). A client
// that leaves mid-stream ends the relay, and the closed upstream connection
// cancels the replica's request; one that leaves while a non-streamed request
// is forwarded has the upstream connection shut too (httplib's Client::stop,
// from a watcher thread of that request: the client has no other way to be
// interrupted), so the replica aborts it as well.
#include <memory>
#include <string>
#include <vector>

#include "parallel/dp_router.h"
#include "server/access.h"

namespace mx::server {

struct RouterServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                    // 0: any free port
  std::vector<std::string> replicas;  // "http://host:port"
  RouterOptions route;                // block_size counts routing units (ids or bytes)
  int http_threads = 64;              // handler threads (each forwarded request holds one)
  HttpLimits http_limits;             // http/transport.h
  int timeout_seconds = 600;          // per forwarded request
  AccessOptions access;               // --api-key, checked here (the replicas behind are loopback-only)
};

class RouterServer {
 public:
  explicit RouterServer(RouterServerOptions opts);
  ~RouterServer();
  int bind();  // returns the port
  void run();
  void shutdown();
  int port() const;
  std::vector<uint64_t> routed() const;  // requests sent to each replica

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Routing units of an OpenAI request body (see above); mx::Error if it has
// neither "prompt" nor "messages".
std::vector<int32_t> routing_units(const std::string& json_body);

}  // namespace mx::server
