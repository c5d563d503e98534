#include "devtools/bpe_trainer.h"

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "tokenizer/tokenizer.h"
#include "core/unicode.h"

namespace mx {

namespace {

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

struct Word {
  std::vector<int32_t> syms;
  int64_t count = 0;
};

struct HeapEntry {
  int64_t count;
  uint64_t key;
};
struct HeapLess {  // top: highest count, then lowest (a, b)
  bool operator()(const HeapEntry& x, const HeapEntry& y) const {
    return x.count != y.count ? x.count < y.count : x.key > y.key;
  }
};

std::string byte_level(const std::string& bytes) {
  std::string s;
  for (char c : bytes) s += byte_level_char(uint8_t(c));
  return s;
}

}  // namespace

BpeVocab train_bpe(std::string_view text, const BpeTrainOptions& opts) {
  // The 256 byte tokens in GPT-2 order: printable Latin-1 first, the rest after.
  std::vector<uint8_t> order;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    if (printable) order.push_back(uint8_t(b));
  }
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    if (!printable) order.push_back(uint8_t(b));
  }
  std::vector<std::string> raw;  // token bytes by id
  std::unordered_map<std::string, int32_t> id_of;
  int32_t byte_id[256];
  for (uint8_t b : order) {
    byte_id[b] = int32_t(raw.size());
    id_of.emplace(std::string(1, char(b)), int32_t(raw.size()));
    raw.emplace_back(1, char(b));
  }

  // Words: pre-tokenized pieces with their counts, in order of first appearance.
  std::vector<Word> words;
  {
    std::vector<uint32_t> cps = unicode::decode_utf8(text);
    if (opts.nfc) cps = unicode::nfc(cps);
    std::unordered_map<std::string, size_t> index;
    for (const Piece& p : pretokenize(cps, opts.pre)) {
      std::string w = unicode::encode_utf8(cps.data() + p.begin, p.end - p.begin);
      if (w.empty()) continue;
      auto [it, fresh] = index.emplace(w, words.size());
      if (fresh) {
        Word word;
        for (char c : w) word.syms.push_back(byte_id[uint8_t(c)]);
        words.push_back(std::move(word));
      }
      words[it->second].count++;
    }
  }

  std::unordered_map<uint64_t, int64_t> counts;
  std::unordered_map<uint64_t, std::vector<uint32_t>> where;  // words that may hold the pair
  std::priority_queue<HeapEntry, std::vector<HeapEntry>, HeapLess> heap;
  for (uint32_t wi = 0; wi < words.size(); ++wi) {
    const Word& w = words[wi];
    for (size_t k = 0; k + 1 < w.syms.size(); ++k) {
      uint64_t key = pair_key(w.syms[k], w.syms[k + 1]);
      counts[key] += w.count;
      where[key].push_back(wi);
    }
  }
  for (const auto& [key, c] : counts) heap.push({c, key});

  BpeVocab out;
  std::vector<uint32_t> seen(words.size(), UINT32_MAX);
  std::vector<uint64_t> changed;
  std::unordered_set<uint64_t> done;
  uint32_t round = 0;
  while (!heap.empty() && out.merges.size() < opts.max_merges &&
         (opts.max_tokens == 0 || raw.size() < opts.max_tokens)) {
    HeapEntry top = heap.top();
    heap.pop();
    auto cit = counts.find(top.key);
    if (cit == counts.end() || cit->second != top.count) continue;  // stale
    if (top.count < opts.min_count) break;
    const int32_t a = int32_t(top.key >> 32), b = int32_t(uint32_t(top.key));
    std::string merged = raw[size_t(a)] + raw[size_t(b)];
    int32_t nid;
    if (auto it = id_of.find(merged); it != id_of.end()) {
      nid = it->second;
    } else {
      nid = int32_t(raw.size());
      id_of.emplace(merged, nid);
      raw.push_back(merged);
    }
    // A pair can form again when a merge re-creates an existing token; the
    // tokenizer applies the first rank then, so it is recorded once.
    if (done.insert(top.key).second) out.merges.emplace_back(byte_level(raw[size_t(a)]), byte_level(raw[size_t(b)]));

    ++round;
    changed.clear();
    std::vector<uint32_t> holders = std::move(where[top.key]);
    where.erase(top.key);
    for (uint32_t wi : holders) {
      if (seen[wi] == round) continue;
      seen[wi] = round;
      Word& w = words[wi];
      bool has = false;
      for (size_t k = 0; k + 1 < w.syms.size() && !has; ++k) has = w.syms[k] == a && w.syms[k + 1] == b;
      if (!has) continue;
      for (size_t k = 0; k + 1 < w.syms.size(); ++k) {
        uint64_t key = pair_key(w.syms[k], w.syms[k + 1]);
        counts[key] -= w.count;
        changed.push_back(key);
      }
      std::vector<int32_t> next;
      next.reserve(w.syms.size());
      for (size_t k = 0; k < w.syms.size(); ++k) {
        if (k + 1 < w.syms.size() && w.syms[k] == a && w.syms[k + 1] == b) {
          next.push_back(nid);
          ++k;
        } else {
          next.push_back(w.syms[k]);
        }
      }
      w.syms.swap(next);
      for (size_t k = 0; k + 1 < w.syms.size(); ++k) {
        uint64_t key = pair_key(w.syms[k], w.syms[k + 1]);
        counts[key] += w.count;
        changed.push_back(key);
        if (w.syms[k] == nid || w.syms[k + 1] == nid) where[key].push_back(wi);
      }
    }
    std::sort(changed.begin(), changed.end());
    changed.erase(std::unique(changed.begin(), changed.end()), changed.end());
    for (uint64_t key : changed) {
      auto it = counts.find(key);
      if (it == counts.end()) continue;
      if (it->second <= 0) {
        counts.erase(it);
        continue;
      }
      heap.push({it->second, key});
    }
  }

  out.tokens.reserve(raw.size());
  for (const std::string& t : raw) out.tokens.push_back(byte_level(t));
  return out;
}

}  // namespace mx
