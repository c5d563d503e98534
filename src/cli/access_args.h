#pragma once
// --api-key / --api-key-all-routes (and MXSERVE_API_KEY), shared by serve and
// route (server/access.h).
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

  void add(CLI::App* s) {
    s->add_option("--api-key", keys,
                  "Require 'Authorization: Bearer KEY' on /v1/* (repeat for several keys; also MXSERVE_API_KEY, "
                  "comma separated)");
    s->add_flag("--api-key-all-routes", all_routes, "With --api-key: also on /health, /metrics and the rest");
  }
  // The options for a server listening on `host`; warns when that is reachable
  // from other machines and no key is set.
  server::AccessOptions get(const std::string& host) const {
    server::AccessOptions a;
    a.api_keys = server::api_keys_from(keys, std::getenv("MXSERVE_API_KEY"));
    a.protect_all = all_routes;
    if (a.api_keys.empty() && !server::is_loopback_host(host))
      std::fprintf(stderr,
                   "mxserve: warning: listening on %s without --api-key: anyone who can reach this address can "
                   "use the model\n",
                   host.c_str());
    return a;
  }
};

}  // namespace mx::cli
