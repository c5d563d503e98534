#pragma once
// The HTTP/1.1 transport under `serve` and `route`: Boost.Beast over Asio.
//
// Why not cpp-httplib (which it replaces, issue 21): httplib gives each
// connection a thread and times out each read on its own, so slow clients
// (slowloris) hold threads for as long as they keep dripping bytes; it has no
// cap on the header count, and a handler that does not stream cannot learn
// that its client went away. Here:
//   - a few io threads (HttpLimits::io_threads, 1 by default) read every
//     request asynchronously: an idle or slow connection costs a socket and a
//     few KiB, no thread. Each connection's handlers run on an Asio strand
//     (Beast's advanced server example, libs/beast/example/advanced/server,
//     accepts onto make_strand(ioc) the same way).
//   - handlers, which block on the engine, run on a bounded pool of `workers`
//     threads, only once the whole request (head and body) is in. A connection
//     has at most one request in a handler at a time (no pipelined parallelism).
//   - limits, each answered with the status a client can act on:
//       head over max_header_bytes or max_header_count fields   -> 431
//       body over max_body_bytes (Content-Length or as it comes) -> 413
//       head not complete head_timeout after its first byte     -> 408, closed
//       body not complete body_timeout after the head           -> 408, closed
//       no byte for idle_timeout (new or keep-alive connection)  -> closed
//       a response (or one stream chunk) unwritten write_timeout -> closed (client_gone)
//       more than max_connections open                          -> 503, closed
//     The 408 / 503 are sent without waiting (one non-blocking send): a client
//     that does not read gets the close alone. After an error answer the
//     connection is closed "lingering" (shutdown of our side, then what the
//     client still sends is read and dropped for up to 2 s) so a client still
//     uploading a too-large body reads the 413 instead of a reset.
//   - disconnect: while a handler runs, the connection waits for its socket
//     to become readable (async_wait(wait_read)) and peeks (recv MSG_PEEK):
//     0 bytes is the client's FIN, so client_gone() turns true; bytes are a
//     pipelined request, and watching stops (its FIN would then go unseen).
//     A client that half-closes its side after sending a request is taken
//     as gone, as vLLM and llama.cpp do.
//   - sockets: SO_REUSEADDR, listen backlog SOMAXCONN, TCP_NODELAY (SSE
//     chunks are small writes: no Nagle + delayed-ACK 40 ms per chunk); the
//     soft RLIMIT_NOFILE is raised toward max_connections + 256 (bind()).
//   - max_connections is the trade-off between memory and slow clients: a
//     flood of slow connections beyond it gets new clients an immediate 503
//     (not a hang) until the head deadline frees their slots.
// Streams use chunked transfer encoding (Beast's chunk_encode.hpp:
// make_chunk / make_chunk_last, as in the docs' "Chunked Encoding" section),
// each chunk written before write() returns; to an HTTP/1.0 client (no chunked
// coding) the bytes as they are, the connection's close ending the body. An
// HTTP/1.1 request without exactly one Host header is a 400 (RFC 9112 3.2).
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mx::server {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "GET", "POST", ... as sent
  std::string target;  // as sent: path and query
  std::string path;    // target up to "?", percent-decoded
  HttpHeaders headers;  // in order, names as sent
  std::string body;
  std::string peer;     // "ip:port" of the client
  // Value of the first header of that name (ASCII case-insensitive); "" if absent.
  std::string header(std::string_view name) const;
  bool has_header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  HttpHeaders headers;  // Content-Length and Connection are the transport's
  std::string body;
  void set_content(std::string b, std::string content_type) {
    body = std::move(b);
    set_header("Content-Type", std::move(content_type));
  }
  void set_header(std::string name, std::string value);  // replaces one of the same name
  std::string header(std::string_view name) const;
};

// One request's way back to its client, used by one handler (one thread).
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  // A whole response. Returns at once (the io thread writes it); false if the
  // client is already gone or something was sent before.
  virtual bool respond(HttpResponse res) = 0;
  // A chunked stream (status and headers now, chunks after); false if gone.
  virtual bool start_stream(int status, HttpHeaders headers) = 0;
  // One chunk, written before this returns; false if the client is gone (or
  // did not read it within write_timeout).
  virtual bool write(std::string_view data) = 0;
  // The last chunk; false if gone.
  virtual bool end_stream() = 0;
  // The client closed its side (or the connection failed). Cheap: an atomic read.
  virtual bool client_gone() const = 0;
};

struct HttpLimits {
  int io_threads = 1;               // threads reading and writing sockets (not handlers)
  int max_connections = 1024;       // open at once; beyond: 503 and closed
  size_t max_header_bytes = 16 << 10;  // request line + fields -> 431
  int max_header_count = 100;       // fields -> 431
  std::chrono::milliseconds head_timeout{10'000};   // from the head's first byte to its end -> 408
  std::chrono::milliseconds body_timeout{30'000};   // from the head's end to the body's -> 408
  std::chrono::milliseconds idle_timeout{10'000};   // no byte on a new or kept-alive connection -> closed
  std::chrono::milliseconds write_timeout{60'000};  // one response or chunk unread by the client -> closed
};

struct HttpTransportOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port (bind() returns it)
  int workers = 64;                        // handler threads
  size_t max_body_bytes = size_t(8) << 20;  // -> 413
  HttpLimits limits;
  // The body of an answer the transport makes itself (400, 408, 413, 431, 500,
  // 503), given its status and message; sent as application/json.
  std::function<std::string(int status, const std::string& message)> error_body;
  // Called (from an io thread) with the status of every response written,
  // or of a stream once its head is written.
  std::function<void(int status)> on_response;
};

using HttpHandler = std::function<void(const HttpRequest&, HttpExchange&)>;

class HttpTransport {
 public:
  // handler: called on a worker thread for every complete request. It should
  // answer (respond or a stream); if it returns without, the client gets a 500;
  // if it throws, a 500 with the exception's message (or, mid-stream, the close).
  HttpTransport(HttpTransportOptions opts, HttpHandler handler);
  ~HttpTransport();  // stop()
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Binds and listens; returns the port. mx::Error when it cannot.
  int bind();
  // Serves on the calling thread (and io_threads - 1 more) until stop().
  void run();
  // Stops accepting, closes idle connections, lets responses being handled or
  // written finish for up to `grace` (then closes them), waits for the
  // handlers to return, and makes run() return. Idempotent; any thread.
  void stop(std::chrono::milliseconds grace = std::chrono::seconds(2));
  int port() const;
  int connections() const;  // open now

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// Whether s (a Host header's host, an Origin's host, or an address) names the
// loopback: "localhost", an IPv4 address 127.x.y.z, or ::1 (bracketed or not).
// Strict: "127.0.0.1.evil.example" is not.
bool is_loopback_name(std::string_view s);

}  // namespace mx::server
