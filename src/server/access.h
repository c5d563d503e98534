#pragma once
// What every request passes before its route runs (cpp-httplib's pre-routing
// handler), for `serve` and the DP router alike, each answered with an OpenAI
// error body:
//   405 Method Not Allowed (with Allow) for a known path asked with another method;
//   401 without `Authorization: Bearer KEY` for one of the server's --api-key
//       keys (compared in constant time), on /v1/* and, with protect_all, on
//       every route (/health, /metrics, ...), as vLLM's --api-key;
//   415 for a POST whose Content-Type is not application/json: a browser form
//       post (or a DNS-rebinding page) cannot send a JSON API request without
//       a CORS preflight, which this server never grants.
#include <string>
#include <vector>

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace mx::server {

struct AccessOptions {
  std::vector<std::string> api_keys;  // empty: no authentication
  bool protect_all = false;           // keys on every route, not only /v1/*
};

// A route a server answers: method and path (a trailing '*' matches any rest).
struct Route {
  std::string method, path;
};

// True when the request was answered here (res holds the error).
bool reject_request(const httplib::Request& req, httplib::Response& res, const AccessOptions& access,
                    const std::vector<Route>& routes);

// Keys from --api-key (repeatable) and MXSERVE_API_KEY (comma separated).
std::vector<std::string> api_keys_from(const std::vector<std::string>& flags, const char* env_value);

// Whether host is a loopback address (127.0.0.0/8, ::1, localhost).
bool is_loopback_host(const std::string& host);

}  // namespace mx::server
