#include "server/access.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

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

void answer(httplib::Response& res, int status, const std::string& msg, const std::string& code,
            const std::string& type = "invalid_request_error") {
  res.status = status;
  res.set_content(error_body(msg, type, "", code).dump(), "application/json");
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

bool reject_request(const httplib::Request& req, httplib::Response& res, const AccessOptions& access,
                    const std::vector<Route>& routes) {
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
    const std::string auth = req.get_header_value("Authorization");
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
    std::string media = lower(req.get_header_value("Content-Type"));
    media = media.substr(0, media.find(';'));  // parameters (charset) do not matter
    const size_t b = media.find_first_not_of(" \t"), e = media.find_last_not_of(" \t");
    if (b == std::string::npos || media.substr(b, e - b + 1) != "application/json") {
      answer(res, 415, "Content-Type must be application/json (got '" + req.get_header_value("Content-Type") + "')",
             "unsupported_media_type");
      return true;
    }
  }
  return false;
}

std::vector<std::string> api_keys_from(const std::vector<std::string>& flags, const char* env_value) {
  std::vector<std::string> keys;
  for (const std::string& k : flags)
    if (!k.empty()) keys.push_back(k);
  if (env_value) {
    std::string s = env_value;
    for (size_t b = 0; b <= s.size();) {
      size_t e = s.find(',', b);
      if (e == std::string::npos) e = s.size();
      if (e > b) keys.push_back(s.substr(b, e - b));
      b = e + 1;
    }
  }
  return keys;
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

}  // namespace mx::server
