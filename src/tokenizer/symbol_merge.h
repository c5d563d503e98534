#pragma once
// The merge loop byte-level BPE and SentencePiece share (llama.cpp's
// llm_tokenizer_bpe_session / llm_tokenizer_spm_session): a word is a linked
// list of symbols, each a run of its bytes; the best adjacent pair is merged
// first, and the pairs the merged symbol makes with its new neighbours are
// queued in turn. The models differ only in which pairs merge and which is
// best. Internal to the tokenizers.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace mx::tokenizer_impl {

// Sym has int32_t prev, next (-1 at the ends) and uint32_t len (0 once merged
// into its left neighbour); Pair has int32_t left, right (symbol indexes).
//   pair_of(l, r) -> std::optional<Pair>: the pair two adjacent symbols make,
//       nullopt when the vocabulary does not merge them;
//   worse(a, b): a merges after b (a strict weak order; the heap is
//       std::priority_queue's, so ties resolve as they did with one);
//   stale(pair, L, R): the symbols changed since the pair was queued;
//   join(L, pair): what the left symbol becomes besides its length.
template <class Pair, class Sym, class PairOf, class Worse, class Stale, class Join>
void merge_best_pairs(std::vector<Sym>& syms, PairOf pair_of, Worse worse, Stale stale, Join join) {
  std::vector<Pair> heap;
  heap.reserve(syms.size());
  auto offer = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    if (std::optional<Pair> p = pair_of(l, r)) {
      heap.push_back(*p);
      std::push_heap(heap.begin(), heap.end(), worse);
    }
  };
  for (size_t i = 1; i < syms.size(); ++i) offer(int32_t(i - 1), int32_t(i));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), worse);
    const Pair b = heap.back();
    heap.pop_back();
    Sym& L = syms[size_t(b.left)];
    Sym& R = syms[size_t(b.right)];
    // A pair whose right symbol is no longer L's neighbour has had one side merged away.
    if (L.len == 0 || R.len == 0 || L.next != b.right || stale(b, L, R)) continue;
    join(L, b);
    L.len += R.len;
    R.len = 0;
    L.next = R.next;
    if (R.next >= 0) syms[size_t(R.next)].prev = b.left;
    offer(L.prev, b.left);
    offer(b.left, L.next);
  }
}

}  // namespace mx::tokenizer_impl
