#pragma once
// Which vocabulary tokens a grammar admits next (constrained decoding).
//
// A token is admitted when the matcher accepts every one of its bytes from the
// current state. The vocabulary is held as a byte trie, so tokens that share a
// prefix share the matcher work and a byte the state rejects prunes every token
// below it (the approach of llama.cpp's grammar sampler and of Outlines' index,
// computed lazily). The matcher's states are numbered as they are met and their
// byte transitions memoised (a DFA built on the fly), so a walk over the trie
// costs a table lookup per node once the states are known: inside a JSON string
// nearly every byte leads back to the same state. Masks are cached per state:
// at the same point of a schema later in the output, or in the next request,
// the mask is a lookup (xgrammar's adaptive token-mask cache keeps the same
// idea, precomputed).
#include <cstdint>
#include <array>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace mx::grammar {

// logits[v] = -inf where admitted[v] == 0, for v < n (branch-free, so it vectorises).
void apply_mask(float* logits, const uint8_t* admitted, int64_t n);

class VocabTrie {
 public:
  // pieces[id]: the bytes token id stands for; an empty piece is never admitted
  // (control tokens, and ids the tokenizer does not define).
  explicit VocabTrie(const std::vector<std::string>& pieces);
  size_t vocab_size() const { return vocab_; }
  const std::string& piece(int32_t id) const { return pieces_[size_t(id)]; }
  // Matcher states by number, with memoised byte transitions.
  class States {
   public:
    int id_of(const Matcher& m);
    int step(int state, uint8_t b);  // -1: the byte is rejected
    size_t size() const { return states_.size(); }

   private:
    std::vector<Matcher> states_;
    std::map<std::vector<Stack>, int> ids_;
    std::vector<std::array<int32_t, 256>> next_;  // -2: not computed yet
  };
  // Sets allowed[id] = 1 for every token whose bytes state s accepts (allowed
  // must be zeroed, vocab_size() long).
  void admitted(States& st, int s, std::vector<uint8_t>& allowed) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, uint32_t>> children;  // sorted by byte
    std::vector<int32_t> ends;                           // tokens whose bytes end here
  };
  void walk(uint32_t node, States& st, int s, std::vector<uint8_t>& allowed) const;
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
  VocabTrie::States states_;  // dropped when it grows past a bound
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace mx::grammar
