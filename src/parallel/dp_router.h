#pragma once
// Data parallel: M replicas, each with its own KV and prefix cache, behind a
// router that sends a request to the replica most likely to hold its prompt's
// longest cached prefix, balanced against load.
//
// The router keeps its own record of what it sent where: chained hashes of the
// block-aligned prefixes of every prompt routed to each replica (what that
// replica's radix cache will hold, barring eviction). That needs no query to
// the replicas, so the same policy serves in-process engines (DataParallel
// below) and separate `mxserve serve` processes on other hosts (the HTTP
// router, cmd_route.cpp), where a prompt's units are its token ids, or its
// UTF-8 bytes when it is text.
//
// Balance: only replicas whose in-flight count is within max_imbalance of the
// least loaded are candidates; among them the longest match wins, then the
// lower load, then round-robin order. Round-robin routing is kept as the
// baseline the tests and the benchmark compare against.
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/engine.h"

namespace mx {

struct RouterOptions {
  bool cache_aware = true;      // false: round-robin
  int block_size = 16;          // units per hashed prefix block (the engines' KV block size)
  int max_imbalance = 4;        // in-flight requests a replica may be above the least loaded one
  size_t max_blocks = 1 << 20;  // prefix hashes remembered per replica (then forgotten oldest first)
};

class PrefixRouter {
 public:
  PrefixRouter(int replicas, RouterOptions opts);
  // Chooses a replica for a prompt, records its prefixes there, counts it in flight.
  int pick(const int32_t* units, size_t n);
  int pick(const std::vector<int32_t>& units) { return pick(units.data(), units.size()); }
  void done(int replica);  // a request routed there finished
  int replicas() const { return int(load_.size()); }
  int in_flight(int replica) const;
  // Full blocks of this prompt the router already sent to `replica`.
  int matched_blocks(int replica, const int32_t* units, size_t n) const;

 private:
  std::vector<uint64_t> block_hashes(const int32_t* units, size_t n) const;
  int match_locked(int replica, const std::vector<uint64_t>& hashes) const;  // mu_ held
  RouterOptions opts_;
  mutable std::mutex mu_;
  std::vector<std::unordered_set<uint64_t>> seen_;
  std::vector<std::vector<uint64_t>> fifo_;  // insertion order, for forgetting
  std::vector<size_t> fifo_head_;
  std::vector<int> load_;
  int rr_ = 0;
};

// M in-process engines behind a PrefixRouter.
class DataParallel {
 public:
  DataParallel(std::vector<std::unique_ptr<Engine>> engines, RouterOptions opts);
  // Routes and submits; returns the replica the request went to.
  int submit(GenerationRequest req, TokenCallback cb);
  void run_until_idle();
  Engine& replica(int i) { return *engines_[i]; }
  int replicas() const { return int(engines_.size()); }
  EngineMetrics metrics() const;  // summed over replicas
  PrefixRouter& router() { return router_; }

 private:
  std::vector<std::unique_ptr<Engine>> engines_;
  PrefixRouter router_;
};

}  // namespace mx
