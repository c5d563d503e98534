#pragma once
// The OpenAI-compatible HTTP server in front of one Engine, on the
// asynchronous transport of http/transport.h (Boost.Beast: limits on heads,
// bodies, deadlines and connections, 408 / 413 / 431 / 503 answered there).
//
// Routes
//   POST /v1/completions, POST /v1/chat/completions  (openai_api.h; SSE when "stream")
//   GET  /v1/models, GET /v1/models/{id}, GET /health, GET /metrics (metrics.h)
// Errors are OpenAI's {"error": {...}}: 400 bad JSON or parameter, 401 without
// a valid API key (--api-key), 404 unknown model or route, 405 wrong method,
// 413 body over max_body_bytes, 415 a POST that is not application/json, 429
// engine queue full (with Retry-After), 503 while shutting down, 500 for
// anything unexpected; 403 for a Host or Origin that is not the loopback on a
// loopback server (access.h: DNS rebinding; --allowed-hosts adds names).
//
// Streaming: "data: <chunk JSON>\n\n" per chunk, "data: [DONE]\n\n" last. A
// chunk is sent when a choice has new text (UTF-8-complete, past any possible
// stop string: text_stream.h) and when it finishes; a model without tokenizer
// sends one chunk per step with its tokens. An SSE comment (": keep-alive")
// goes out after 10 s without a chunk. A client that goes away mid-stream has
// its requests cancelled (engine finish reason "abort").
// A stop string cuts the text before it and cancels the engine request; the
// choice's finish_reason is then "stop".
//
// Extensions: every choice (and stream chunk) carries "token_ids", the
// generated ids (up to and including the token that completed a stop string).
// A model without tokenizer.json serves token-id prompts only: its text is
// always "" (there are no pieces to show), token_ids carry the output, and
// logprobs name tokens "token_id:<id>".
// A client that closes its connection while its non-streamed request is
// generated has its requests cancelled too (the transport watches the socket
// for its FIN: HttpExchange::client_gone; engine finish reason "abort",
// counted in mxserve_requests_total{finish_reason="abort"} and as HTTP 499,
// nginx's "client closed request", in mxserve_http_requests_total), within
// 200 ms. A client that half-closes its side after sending counts as gone.
#include <chrono>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "server/access.h"
#include "server/http/transport.h"
#include "server/metrics.h"
#include "server/openai_api.h"

namespace mx {
class Tokenizer;
}

namespace mx::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (bind() returns it)
  std::string served_model_name = "model";
  std::string model_dir;  // for chat templates (render_chat); "" when the model is one file
  size_t max_body_bytes = size_t(8) << 20;
  // Handler threads: requests handled at once (each generation request,
  // streamed or not, holds one for its lifetime; more wait, read and queued,
  // for a free one). Size it to max_running + max_queue. Reading requests and
  // idle connections take no thread (http/transport.h).
  int http_threads = 64;
  // Connections, head / body / idle / write deadlines, header count and bytes
  // (http/transport.h HttpLimits: 1024 connections, 100 fields, 16 KiB head,
  // head 10 s, body 30 s, idle 10 s, write 60 s).
  HttpLimits http_limits;
  int keepalive_seconds = 10;  // SSE comment after this long without a chunk
  int kv_block_size = 16;      // EngineOptions::block_size (to know the KV capacity per sequence)
  ApiLimits limits;            // per-request bounds (openai_api.h)
  AccessOptions access;        // --api-key, --allowed-hosts (access.h: also 403, 405 and 415 for every route);
                               // check_host is set here from `host`
};

class HttpServer {
 public:
  // tokenizer may be null (token-id prompts only). engine must be started
  // (Engine::start) and outlive the server.
  HttpServer(Engine& engine, const Tokenizer* tokenizer, ServerOptions opts);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port; returns the port. mx::Error when it cannot.
  int bind();
  // Serves until shutdown() (from another thread or a signal handler thread).
  void run();
  // Graceful stop: new generation requests get 503; waits up to `drain` for the
  // in-flight ones to finish, cancels what is left (finish reason "abort"),
  // then stops listening and returns once run() has returned (if it was running).
  void shutdown(std::chrono::milliseconds drain = std::chrono::seconds(30));

  int port() const;
  int in_flight() const;  // generation requests being served
  ServerMetrics& metrics();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mx::server
