#pragma once
// Radix tree over token ids at KV-block granularity: each node is one full block
// of block_size tokens, keyed by those tokens under its parent, and owns one
// reference to the KV block that holds them. A new request walks the tree with
// its prompt and reuses every matching block (taking a reference per block),
// so only the unmatched suffix is prefilled. Nodes whose block nobody else
// references are evictable, least recently used leaves first.
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "engine/kv_cache.h"

namespace mx {

class PrefixCache {
 public:
  explicit PrefixCache(KVPool& pool) : pool_(pool) {}
  ~PrefixCache();

  // Longest cached prefix of toks[0, n) in whole blocks, at most max_tokens
  // tokens. Appends the blocks to `blocks` (each retained for the caller) and
  // returns the number of tokens they hold.
  int match(const int32_t* toks, int n, int max_tokens, std::vector<int>& blocks);

  // Registers the full blocks of a sequence whose KV holds toks[0, n): blocks
  // already cached are left as they are, new ones are retained by the cache.
  void insert(const int32_t* toks, int n, const std::vector<int>& blocks);

  // Frees up to `want` blocks held only by the cache, LRU leaves first.
  // Returns how many were freed.
  int evict(int want);

  int cached_blocks() const { return n_nodes_; }
  int evictable_blocks() const;

 private:
  struct Node {
    std::vector<int32_t> key;  // the block's tokens
    int block = -1;
    uint64_t last_use = 0;
    Node* parent = nullptr;
    std::map<std::vector<int32_t>, std::unique_ptr<Node>> children;
  };
  void touch(Node* n);

  KVPool& pool_;
  Node root_;
  uint64_t clock_ = 0;
  int n_nodes_ = 0;
};

}  // namespace mx
