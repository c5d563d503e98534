#include "server/access.h"

#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/openai_api.h"

namespace mx::server {

namespace {

bool path_matches(const std::string& pattern, const std::string& path) {
  if (!pattern.empty() && pattern.back() == '*')
    return path.compare(0, pattern.size() - 1, pattern, 0, pattern.size() - 1) == 0;
  return path == pattern;
}

// Constant time in the key's contents: every key is compared in full.
bool key_ok(const std::string& given, const std::vector<std::string>& keys) {
  unsigned ok = 0;
  for (const std::string& k : keys) {
    unsigned diff = unsigned(given.size() ^ k.size());
    for (size_t i = 0; i < k.size(); ++i) diff |= unsigned(uint8_t(k[i]) ^ uint8_t(i < given.size() ? given[i] : 0));
    ok |= unsigned(diff == 0);
  }
  return ok != 0;
}

void answer(HttpResponse& res, int status, const std::string& msg, const std::string& code,
            const std::string& type = "invalid_request_error") {
  res.status = status;
  res.set_content(error_body(msg, type, "", code).dump(), "application/json");
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool host_allowed(const std::string& host, const AccessOptions& access) {
  if (is_loopback_name(host)) return true;
  for (const std::string& a : access.allowed_hosts)
    if (a == "*" || lower(a) == host) return true;
  return false;
}

}  // namespace

std::string host_of_header(const std::string& value, bool origin) {
  std::string v = lower(value);
  if (origin) {
    const size_t s = v.find("://");
    if (s == std::string::npos) return "";
    v = v.substr(s + 3);
    v = v.substr(0, v.find('/'));
  }
  if (!v.empty() && v[0] == '[') {
    const size_t e = v.find(']');
    return e == std::string::npos ? "" : v.substr(0, e + 1);
  }
  return v.substr(0, v.find(':'));
}

bool reject_request(const HttpRequest& req, HttpResponse& res, const AccessOptions& access,
                    const std::vector<Route>& routes) {
  if (access.check_host) {
    // A request for another host (DNS rebinding), or from a page served by one.
    const auto refuse = [&](const char* header, const char* whom, const char* code) {
      answer(res, 403,
             fmt::format("{} '{}' is not allowed: this server listens on a loopback address and answers only {} "
                         "localhost, 127.0.0.1 or [::1] (see --allowed-hosts)",
                         header, req.header(header), whom),
             code, "permission_error");
      return true;
    };
    if (req.has_header("Host") && !host_allowed(host_of_header(req.header("Host"), false), access))
      return refuse("Host", "requests for", "host_not_allowed");
    if (req.has_header("Origin") && !host_allowed(host_of_header(req.header("Origin"), true), access))
      return refuse("Origin", "pages served from", "origin_not_allowed");
  }
  bool known = false, method_ok = false;
  std::string allow;
  for (const Route& r : routes)
    if (path_matches(r.path, req.path)) {
      known = true;
      method_ok |= r.method == req.method || (r.method == "GET" && req.method == "HEAD");
      if (allow.find(r.method) == std::string::npos) allow += (allow.empty() ? "" : ", ") + r.method;
    }
  if (known && !method_ok) {
    res.set_header("Allow", allow);
    answer(res, 405, "method " + req.method + " is not allowed on " + req.path + " (allowed: " + allow + ")",
           "method_not_allowed");
    return true;
  }
  if (!access.api_keys.empty() && (access.protect_all || req.path.rfind("/v1/", 0) == 0)) {
    const std::string auth = req.header("Authorization");
    const std::string prefix = "bearer ";
    const bool bearer = auth.size() > prefix.size() && lower(auth.substr(0, prefix.size())) == prefix;
    if (!bearer || !key_ok(auth.substr(prefix.size()), access.api_keys)) {
      res.set_header("WWW-Authenticate", "Bearer");
      answer(res, 401,
             bearer ? "Incorrect API key provided" : "missing API key: send it as 'Authorization: Bearer KEY'",
             "invalid_api_key");
      return true;
    }
  }
  if (req.method == "POST" && known) {
    std::string media = lower(req.header("Content-Type"));
    media = media.substr(0, media.find(';'));  // parameters (charset) do not matter
    const size_t b = media.find_first_not_of(" \t"), e = media.find_last_not_of(" \t");
    if (b == std::string::npos || media.substr(b, e - b + 1) != "application/json") {
      answer(res, 415, "Content-Type must be application/json (got '" + req.header("Content-Type") + "')",
             "unsupported_media_type");
      return true;
    }
  }
  return false;
}

std::vector<std::string> api_keys_from(const std::vector<std::string>& flags, const char* env_value) {
  // An empty key asked for is a mistake (`--api-key "$KEY"` with KEY unset), never "no key":
  // dropped, it left the server open without a word.
  std::vector<std::string> keys;
  for (const std::string& k : flags) {
    MX_CHECK(!k.empty(), "--api-key is empty (an unset variable?): give the key, or no --api-key for an open server");
    keys.push_back(k);
  }
  if (env_value && *env_value) {
    std::string s = env_value;
    size_t from_env = 0;
    for (size_t b = 0; b <= s.size();) {
      size_t e = s.find(',', b);
      if (e == std::string::npos) e = s.size();
      if (e > b) keys.push_back(s.substr(b, e - b)), ++from_env;
      b = e + 1;
    }
    MX_CHECK(from_env > 0, "MXSERVE_API_KEY is set to '{}', which holds no key", s);
  }
  return keys;
}

bool is_loopback_host(const std::string& host) { return is_loopback_name(host); }

}  // namespace mx::server
