#pragma once
// Submitting requests to an Engine and collecting what each one streams.
#include <map>
#include <memory>
#include <vector>

#include "engine/engine.h"

namespace mxtest {

struct Collected {
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, mx::TokenEvent> final;
};

inline uint64_t submit(mx::Engine& e, Collected& c, const std::vector<int32_t>& p, int max_tokens, float temp = 0,
                       uint64_t seed = 0) {
  mx::GenerationRequest r;
  r.prompt = p;
  r.max_tokens = max_tokens;
  r.sampling.temperature = temp;
  r.sampling.seed = seed;
  auto id = std::make_shared<uint64_t>(0);
  uint64_t got = e.submit(r, [&c, id](const mx::TokenEvent& ev) {
    if (ev.token >= 0) c.tokens[*id].push_back(ev.token);
    if (ev.finished) c.final[*id] = ev;
  });
  *id = got;
  return got;
}

}  // namespace mxtest
