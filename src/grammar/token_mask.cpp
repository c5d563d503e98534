#include "grammar/token_mask.h"

#include <algorithm>

namespace mx::grammar {

VocabTrie::VocabTrie(const std::vector<std::string>& pieces) : pieces_(pieces), vocab_(pieces.size()) {
  nodes_.emplace_back();
  for (size_t id = 0; id < pieces.size(); ++id) {
    if (pieces[id].empty()) continue;
    uint32_t n = 0;
    for (char c : pieces[id]) {
      const uint8_t b = uint8_t(c);
      auto& ch = nodes_[n].children;
      auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, uint32_t(0)),
                                 [](const auto& x, const auto& y) { return x.first < y.first; });
      if (it != ch.end() && it->first == b) {
        n = it->second;
      } else {
        const uint32_t child = uint32_t(nodes_.size());
        ch.insert(it, {b, child});
        nodes_.emplace_back();  // (invalidates ch)
        n = child;
      }
    }
    nodes_[n].ends.push_back(int32_t(id));
  }
}

void VocabTrie::walk(uint32_t node, const Matcher& m, std::vector<uint8_t>& allowed) const {
  const ByteSet next = m.next_bytes();
  for (const auto& [b, child] : nodes_[node].children) {
    if (!next.has(b)) continue;
    const Matcher after = m.accept(b);
    if (after.dead()) continue;
    for (int32_t id : nodes_[child].ends) allowed[size_t(id)] = 1;
    if (!nodes_[child].children.empty()) walk(child, after, allowed);
  }
}

void VocabTrie::admitted(const Matcher& m, std::vector<uint8_t>& allowed) const { walk(0, m, allowed); }

GrammarMasks::GrammarMasks(Grammar g, std::shared_ptr<const VocabTrie> vocab, size_t max_cached)
    : g_(std::move(g)), vocab_(std::move(vocab)), max_cached_(std::max<size_t>(max_cached, 1)) {}

namespace {
size_t hash_stacks(const std::vector<Stack>& v) {
  size_t h = v.size();
  for (const Stack& s : v) {
    h = h * 1000003u ^ s.size();
    for (uint32_t p : s) h = (h ^ p) * 0x100000001b3ull;
  }
  return h;
}
}  // namespace

std::shared_ptr<const std::vector<uint8_t>> GrammarMasks::admitted(const Matcher& m) {
  const size_t h = hash_stacks(m.stacks());
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = index_.find(h);
    if (it != index_.end())
      for (auto e : it->second)
        if (e->first == m.stacks()) {
          lru_.splice(lru_.begin(), lru_, e);
          ++hits_;
          return e->second;
        }
    ++misses_;
  }
  auto mask = std::make_shared<std::vector<uint8_t>>(vocab_->vocab_size(), 0);
  vocab_->admitted(m, *mask);
  std::lock_guard<std::mutex> lk(mu_);
  lru_.emplace_front(m.stacks(), mask);
  index_[h].push_back(lru_.begin());
  while (lru_.size() > max_cached_) {
    auto last = std::prev(lru_.end());
    auto& bucket = index_[hash_stacks(last->first)];
    bucket.erase(std::find(bucket.begin(), bucket.end(), last));
    if (bucket.empty()) index_.erase(hash_stacks(last->first));
    lru_.pop_back();
  }
  return mask;
}

}  // namespace mx::grammar
