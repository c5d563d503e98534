#include "engine/prefix_cache.h"

#include <functional>

namespace mx {

PrefixCache::~PrefixCache() {
  std::function<void(Node&)> drop = [&](Node& n) {
    for (auto& [k, c] : n.children) {
      drop(*c);
      pool_.release(c->block);
    }
  };
  drop(root_);
}

void PrefixCache::touch(Node* n) {
  for (++clock_; n && n != &root_; n = n->parent) n->last_use = clock_;
}

int PrefixCache::match(const int32_t* toks, int n, int max_tokens, std::vector<int>& blocks) {
  const int bs = pool_.block_size();
  Node* cur = &root_;
  int matched = 0;
  std::vector<int32_t> key(bs);
  while (matched + bs <= std::min(n, max_tokens)) {
    key.assign(toks + matched, toks + matched + bs);
    auto it = cur->children.find(key);
    if (it == cur->children.end()) break;
    cur = it->second.get();
    pool_.retain(cur->block);
    blocks.push_back(cur->block);
    matched += bs;
  }
  touch(cur);
  return matched;
}

void PrefixCache::insert(const int32_t* toks, int n, const std::vector<int>& blocks) {
  const int bs = pool_.block_size();
  Node* cur = &root_;
  for (int b = 0; (b + 1) * bs <= n && b < int(blocks.size()); ++b) {
    std::vector<int32_t> key(toks + b * bs, toks + (b + 1) * bs);
    auto it = cur->children.find(key);
    if (it == cur->children.end()) {
      auto node = std::make_unique<Node>();
      node->key = key;
      node->block = blocks[b];
      node->parent = cur;
      pool_.retain(blocks[b]);
      ++n_nodes_;
      it = cur->children.emplace(std::move(key), std::move(node)).first;
    }
    cur = it->second.get();
  }
  touch(cur);
}

int PrefixCache::evictable_blocks() const {
  int n = 0;
  std::function<void(const Node&)> walk = [&](const Node& x) {
    for (const auto& [k, c] : x.children) {
      walk(*c);
      n += pool_.refcount(c->block) == 1;
    }
  };
  walk(root_);
  return n;
}

int PrefixCache::evict(int want) {
  int freed = 0;
  while (freed < want) {
    // The least recently used leaf that only the cache references.
    Node* victim = nullptr;
    std::function<void(Node&)> walk = [&](Node& x) {
      for (auto& [k, c] : x.children) {
        if (c->children.empty()) {
          if (pool_.refcount(c->block) == 1 && (!victim || c->last_use < victim->last_use)) victim = c.get();
        } else {
          walk(*c);
        }
      }
    };
    walk(root_);
    if (!victim) break;
    pool_.release(victim->block);
    Node* parent = victim->parent;
    parent->children.erase(victim->key);
    --n_nodes_;
    ++freed;
  }
  return freed;
}

}  // namespace mx
