#pragma once
// Which vocabulary tokens a grammar admits next (constrained decoding).
//
// A token is admitted when the matcher accepts every one of its bytes from the
// current state. The vocabulary is held as a byte trie, so tokens that share a
// prefix share the matcher work and a byte the state rejects prunes every token
// below it (the approach of llama.cpp's grammar sampler and of Outlines' index,
// computed lazily). Masks are cached per matcher state: inside a JSON string, or
// at the same point of a schema in the next request, the state repeats, and
// its mask is a lookup (xgrammar's adaptive token-mask cache keeps the same
// idea, precomputed).
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace mx::grammar {

class VocabTrie {
 public:
  // pieces[id]: the bytes token id stands for; an empty piece is never admitted
  // (control tokens, and ids the tokenizer does not define).
  explicit VocabTrie(const std::vector<std::string>& pieces);
  size_t vocab_size() const { return vocab_; }
  const std::string& piece(int32_t id) const { return pieces_[size_t(id)]; }
  // Sets allowed[id] = 1 for every token whose bytes m accepts (allowed must be
  // zeroed, vocab_size() long).
  void admitted(const Matcher& m, std::vector<uint8_t>& allowed) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, uint32_t>> children;  // sorted by byte
    std::vector<int32_t> ends;                           // tokens whose bytes end here
  };
  void walk(uint32_t node, const Matcher& m, std::vector<uint8_t>& allowed) const;
  std::vector<Node> nodes_;
  std::vector<std::string> pieces_;
  size_t vocab_ = 0;
};

// A grammar compiled for one vocabulary, shared by the requests that use it,
// with the mask cache (thread-safe; least recently used states are dropped past
// a fixed count).
class GrammarMasks {
 public:
  GrammarMasks(Grammar g, std::shared_ptr<const VocabTrie> vocab, size_t max_cached = 512);
  const Grammar& grammar() const { return g_; }
  const VocabTrie& vocab() const { return *vocab_; }
  // The tokens admitted in state m (1 = admitted), from the cache or computed.
  std::shared_ptr<const std::vector<uint8_t>> admitted(const Matcher& m);
  uint64_t cache_hits() const { return hits_; }
  uint64_t cache_misses() const { return misses_; }

 private:
  Grammar g_;
  std::shared_ptr<const VocabTrie> vocab_;
  size_t max_cached_;
  std::mutex mu_;
  using Entry = std::pair<std::vector<Stack>, std::shared_ptr<const std::vector<uint8_t>>>;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<size_t, std::vector<std::list<Entry>::iterator>> index_;  // by hash of the stacks
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace mx::grammar
