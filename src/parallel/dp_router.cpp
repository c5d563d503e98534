#include "parallel/dp_router.h"

#include <algorithm>

#include "core/error.h"

namespace mx {

PrefixRouter::PrefixRouter(int replicas, RouterOptions opts)
    : opts_(opts), seen_(replicas), fifo_(replicas), fifo_head_(replicas, 0), load_(replicas, 0) {
  MX_CHECK(replicas >= 1 && replicas <= 4096, "data parallel needs 1..4096 replicas, got {}", replicas);
  MX_CHECK(opts.block_size >= 1 && opts.max_imbalance >= 0, "router: bad block size {} or imbalance {}",
           opts.block_size, opts.max_imbalance);
}

std::vector<uint64_t> PrefixRouter::block_hashes(const int32_t* u, size_t n) const {
  // Chained FNV-1a: block i's hash covers every unit of blocks 0..i, as the
  // radix cache's path from the root does.
  std::vector<uint64_t> h;
  uint64_t x = 1469598103934665603ull;
  const size_t bs = size_t(opts_.block_size);
  for (size_t b = 0; (b + 1) * bs <= n; ++b) {
    for (size_t i = b * bs; i < (b + 1) * bs; ++i) {
      uint32_t v = uint32_t(u[i]);
      for (int k = 0; k < 4; ++k, v >>= 8) x = (x ^ (v & 0xff)) * 1099511628211ull;
    }
    h.push_back(x);
  }
  return h;
}

int PrefixRouter::match_locked(int r, const std::vector<uint64_t>& h) const {
  int m = 0;
  while (m < int(h.size()) && seen_[r].count(h[m])) ++m;
  return m;
}

int PrefixRouter::matched_blocks(int r, const int32_t* u, size_t n) const {
  std::vector<uint64_t> h = block_hashes(u, n);
  std::lock_guard<std::mutex> lk(mu_);
  return match_locked(r, h);
}

int PrefixRouter::pick(const int32_t* u, size_t n) {
  std::vector<uint64_t> h = block_hashes(u, n);
  std::lock_guard<std::mutex> lk(mu_);
  const int M = int(load_.size());
  int choice = 0;
  if (!opts_.cache_aware) {
    choice = rr_;
    rr_ = (rr_ + 1) % M;
  } else {
    const int min_load = *std::min_element(load_.begin(), load_.end());
    int best = -1, best_match = -1;
    for (int k = 0; k < M; ++k) {
      const int r = (rr_ + k) % M;  // ties go round-robin
      if (load_[r] > min_load + opts_.max_imbalance) continue;
      const int m = match_locked(r, h);
      if (m > best_match || (m == best_match && load_[r] < load_[best])) best = r, best_match = m;
    }
    choice = best;
    if (best_match == 0) rr_ = (choice + 1) % M;  // a cold prompt: spread the next cold one
  }
  ++load_[choice];
  auto& seen = seen_[choice];
  auto& fifo = fifo_[choice];
  for (uint64_t x : h)
    if (seen.insert(x).second) fifo.push_back(x);
  while (seen.size() > opts_.max_blocks) seen.erase(fifo[fifo_head_[choice]++]);
  if (fifo_head_[choice] > fifo.size() / 2 && fifo_head_[choice] > 1024) {
    fifo.erase(fifo.begin(), fifo.begin() + long(fifo_head_[choice]));
    fifo_head_[choice] = 0;
  }
  return choice;
}

void PrefixRouter::done(int r) {
  std::lock_guard<std::mutex> lk(mu_);
  MX_CHECK(r >= 0 && r < int(load_.size()) && load_[r] > 0, "router: done() for replica {} with nothing in flight", r);
  --load_[r];
}

int PrefixRouter::in_flight(int r) const {
  std::lock_guard<std::mutex> lk(mu_);
  return load_[r];
}

DataParallel::DataParallel(std::vector<std::unique_ptr<Engine>> engines, RouterOptions opts)
    : engines_(std::move(engines)), router_(int(engines_.size()), opts) {}

int DataParallel::submit(GenerationRequest req, TokenCallback cb) {
  const int r = router_.pick(req.prompt);
  try {
    engines_[r]->submit(std::move(req), [this, r, cb = std::move(cb)](const TokenEvent& ev) {
      if (ev.finished) router_.done(r);
      cb(ev);
    });
  } catch (...) {
    router_.done(r);
    throw;
  }
  return r;
}

void DataParallel::run_until_idle() {
  for (auto& e : engines_) e->run_until_idle();
}

EngineMetrics DataParallel::metrics() const {
  EngineMetrics s;
  for (const auto& e : engines_) {
    EngineMetrics m = e->metrics();
    s.waiting += m.waiting, s.running += m.running;
    s.kv_blocks_total += m.kv_blocks_total, s.kv_blocks_free += m.kv_blocks_free;
    s.kv_blocks_cached += m.kv_blocks_cached;
    s.prompt_tokens += m.prompt_tokens, s.cached_prompt_tokens += m.cached_prompt_tokens;
    s.computed_prompt_tokens += m.computed_prompt_tokens, s.generated_tokens += m.generated_tokens;
    s.requests_finished += m.requests_finished, s.preemptions += m.preemptions, s.steps += m.steps;
  }
  return s;
}

}  // namespace mx
