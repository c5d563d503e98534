#pragma once
// What every request passes before its route runs, for `serve` and the DP
// router alike, each answered with an OpenAI error body:
//   403 on a server listening on a loopback address (check_host) when the Host
//       header does not name the loopback (localhost, 127.x.y.z, [::1], any
//       port), or an Origin header is present and does not: DNS rebinding
//       (a page on evil.example whose name is re-pointed at 127.0.0.1) reaches
//       a loopback server only with Host / Origin evil.example. Jupyter and
//       Vite refuse such requests the same way (403). allowed_hosts
//       (--allowed-hosts) adds names, "*" turns the check off. A request
//       without Host (HTTP/1.0) passes: browsers always send one. Servers on
//       other addresses do not check Host (they are meant to be reached by
//       other names; protect them with --api-key);
//   405 Method Not Allowed (with Allow) for a known path asked with another method;
//   401 without `Authorization: Bearer KEY` for one of the server's --api-key
//       keys (compared in constant time), on /v1/* and, with protect_all, on
//       every route (/health, /metrics, ...), as vLLM's --api-key;
//   415 for a POST whose Content-Type is not application/json: a browser form
//       post (or a DNS-rebinding page) cannot send a JSON API request without
//       a CORS preflight, which this server never grants.
#include <string>
#include <vector>

#include "server/http/transport.h"

namespace mx::server {

struct AccessOptions {
  std::vector<std::string> api_keys;  // empty: no authentication
  bool protect_all = false;           // keys on every route, not only /v1/*
  // Host / Origin check (above). The servers turn it on themselves when they
  // listen on a loopback address; allowed_hosts are extra names (no port).
  bool check_host = false;
  std::vector<std::string> allowed_hosts;
};

// A route a server answers: method and path (a trailing '*' matches any rest).
struct Route {
  std::string method, path;
};

// True when the request was answered here (res holds the error).
bool reject_request(const HttpRequest& req, HttpResponse& res, const AccessOptions& access,
                    const std::vector<Route>& routes);

// The host of a Host header value ("name:port", "[v6]:port") or of an Origin
// ("scheme://host:port"), lower-cased, without port; "" if it has none.
std::string host_of_header(const std::string& value, bool origin);

// Keys from --api-key (repeatable) and MXSERVE_API_KEY (comma separated; unset or "" for none).
// An empty --api-key, or a MXSERVE_API_KEY of commas only, is an mx::Error.
std::vector<std::string> api_keys_from(const std::vector<std::string>& flags, const char* env_value);

// Whether host is a loopback address (127.0.0.0/8, ::1, localhost); strict
// (http/transport.h is_loopback_name).
bool is_loopback_host(const std::string& host);

}  // namespace mx::server
