#include "grammar/token_mask.h"

#include <algorithm>
#include <cmath>

namespace mx::grammar {

void apply_mask(float* logits, const uint8_t* admitted, int64_t n) {
  for (int64_t v = 0; v < n; ++v) logits[v] = admitted[v] ? logits[v] : -INFINITY;
}

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

int VocabTrie::States::id_of(const Matcher& m) {
  auto [it, fresh] = ids_.emplace(m.stacks(), int(states_.size()));
  if (fresh) {
    states_.push_back(m);
    std::array<int32_t, 256> unknown;
    unknown.fill(-2);
    next_.push_back(unknown);
  }
  return it->second;
}

int VocabTrie::States::step(int s, uint8_t b) {
  if (next_[size_t(s)][b] != -2) return next_[size_t(s)][b];
  const Matcher after = states_[size_t(s)].accept(b);
  const int t = after.dead() ? -1 : id_of(after);  // (may grow next_: index again below)
  next_[size_t(s)][b] = t;
  return t;
}

void VocabTrie::walk(uint32_t node, States& st, int s, std::vector<uint8_t>& allowed) const {
  for (const auto& [b, child] : nodes_[node].children) {
    const int t = st.step(s, b);
    if (t < 0) continue;
    for (int32_t id : nodes_[child].ends) allowed[size_t(id)] = 1;
    if (!nodes_[child].children.empty()) walk(child, st, t, allowed);
  }
}

void VocabTrie::admitted(States& st, int s, std::vector<uint8_t>& allowed) const { walk(0, st, s, allowed); }

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
  // One lock for lookup and computation: the state table is shared, and two
  // threads missing on one state would otherwise both insert it.
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = index_.find(h); it != index_.end())
    for (auto e : it->second)
      if (e->first == m.stacks()) {
        lru_.splice(lru_.begin(), lru_, e);
        ++hits_;
        return e->second;
      }
  ++misses_;
  auto mask = std::make_shared<std::vector<uint8_t>>(vocab_->vocab_size(), 0);
  if (states_.size() > 65536) states_ = VocabTrie::States();  // bound the memory (256 ints a state)
  vocab_->admitted(states_, states_.id_of(m), *mask);
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
