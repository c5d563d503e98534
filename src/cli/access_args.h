#pragma once
// --api-key / --api-key-all-routes (and MXSERVE_API_KEY), --allowed-hosts,
// and the HTTP transport's main limits, shared by serve and route
// (server/access.h, server/http/transport.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "server/access.h"

namespace mx::cli {

struct AccessArgs {
  std::vector<std::string> keys;
  bool all_routes = false;
  std::vector<std::string> allowed_hosts;

  void add(CLI::App* s) {
    s->add_option("--api-key", keys,
                  "Require 'Authorization: Bearer KEY' on /v1/* (repeat for several keys; also MXSERVE_API_KEY, "
                  "comma separated)");
    s->add_flag("--api-key-all-routes", all_routes, "With --api-key: also on /health, /metrics and the rest");
    s->add_option("--allowed-hosts", allowed_hosts,
                  "On a loopback --host, Host / Origin names accepted besides localhost, 127.x and [::1] (others: "
                  "403, against DNS rebinding); repeat or comma-separate; '*': no check")
        ->delimiter(',');
  }
  // The options for a server listening on `host`; warns when that is reachable
  // from other machines and no key is set.
  server::AccessOptions get(const std::string& host) const {
    server::AccessOptions a;
    a.api_keys = server::api_keys_from(keys, std::getenv("MXSERVE_API_KEY"));
    a.protect_all = all_routes;
    a.allowed_hosts = allowed_hosts;
    if (a.api_keys.empty() && !server::is_loopback_host(host))
      std::fprintf(stderr,
                   "mxserve: warning: listening on %s without --api-key: anyone who can reach this address can "
                   "use the model\n",
                   host.c_str());
    return a;
  }
};

// The transport limits operators most often change (the rest keep HttpLimits' defaults).
struct HttpLimitArgs {
  server::HttpLimits limits;
  int head_s = 10, idle_s = 10;

  void add(CLI::App* s) {
    s->add_option("--max-connections", limits.max_connections, "Open connections at once (more: 503 and closed)")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    s->add_option("--head-timeout", head_s,
                  "Seconds a request head may take from its first byte (slower: 408 and closed)")
        ->check(CLI::Range(1, 3600))
        ->capture_default_str();
    s->add_option("--idle-timeout", idle_s, "Seconds a connection may stay open without a request")
        ->check(CLI::Range(1, 3600))
        ->capture_default_str();
  }
  server::HttpLimits get() const {
    server::HttpLimits l = limits;
    l.head_timeout = std::chrono::seconds(head_s);
    l.idle_timeout = std::chrono::seconds(idle_s);
    return l;
  }
};

}  // namespace mx::cli
