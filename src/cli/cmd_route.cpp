// mxserve route: the data-parallel HTTP router in front of `mxserve serve`
// replicas (server/dp_proxy.h), e.g. two replicas on two hosts:
//   host1$ mxserve serve --model M --port 8001      host2$ mxserve serve --model M --port 8001
//   mxserve route --replica http://host1:8001 --replica http://host2:8001 --port 8000
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <thread>

#include "cli/access_args.h"
#include "cli/commands.h"
#include "server/dp_proxy.h"

namespace mx::cli {

Command add_route(CLI::App& app) {
  auto* s = app.add_subcommand("route", "Data-parallel router: cache-aware load balancing over mxserve serve replicas");
  auto o = std::make_shared<server::RouterServerOptions>();
  auto round_robin = std::make_shared<bool>(false);
  auto access = std::make_shared<AccessArgs>();
  auto http = std::make_shared<HttpLimitArgs>();
  o->route.block_size = 64;  // text prompts route on bytes: about 16 tokens
  s->add_option("--replica", o->replicas, "Replica base URL (repeat), e.g. http://10.0.0.2:8001")->required();
  s->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  s->add_option("--port", o->port, "Port (0: any free port)")->check(CLI::Range(0, 65535))->capture_default_str();
  s->add_option("--block-units", o->route.block_size,
                "Prefix block the router hashes: token ids for id prompts, bytes for text")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  s->add_option("--max-imbalance", o->route.max_imbalance,
                "In-flight requests a replica may run above the least loaded one before the prefix match yields")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  s->add_flag("--round-robin", *round_robin, "Ignore prefixes: plain round-robin (the baseline)");
  access->add(s);  // the client's Authorization header is passed on to the replicas
  http->add(s);
  return {s, [o, round_robin, access, http] {
            o->access = access->get(o->host);
            o->http_limits = http->get();
            sigset_t sigs;
            sigemptyset(&sigs);
            sigaddset(&sigs, SIGINT);
            sigaddset(&sigs, SIGTERM);
            pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
            o->route.cache_aware = !*round_robin;
            server::RouterServer r(*o);
            const int port = r.bind();
            std::thread waiter([&] {
              int sig = 0;
              sigwait(&sigs, &sig);
              r.shutdown();
            });
            std::fprintf(stderr, "mxserve route: %zu replicas behind http://%s:%d (%s)\n", o->replicas.size(),
                         o->host.c_str(), port, *round_robin ? "round-robin" : "cache-aware");
            r.run();
            pthread_kill(waiter.native_handle(), SIGTERM);
            waiter.join();
            return 0;
          }};
}

}  // namespace mx::cli
