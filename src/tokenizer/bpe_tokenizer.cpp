#include "tokenizer/bpe_tokenizer.h"

#include <optional>

#include "core/unicode.h"
#include "tokenizer/symbol_merge.h"

namespace mx::tokenizer_impl {

struct BpeTokenizer::Sym {
  int32_t sym;  // interned string id, -1 if the string is neither a token nor a merge part
  int32_t prev, next;
  uint32_t start, len;  // bytes of the word
};
struct BpeTokenizer::Bigram {
  int32_t rank, left, right, lsym, rsym, result;
};

void BpeTokenizer::build(Options opt, const std::vector<std::pair<std::string, std::string>>& merges) {
  opt_ = std::move(opt);
  sym_index_.reserve(v_.size() + merges.size());
  for (size_t i = 0; i < v_.size(); ++i)
    if (!v_.text[i].empty()) intern(v_.text[i]);
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& [a, b] = merges[i];
    int32_t sa = intern(a), sb = intern(b), sr = intern(a + b);
    merges_.emplace(key(sa, sb), Merge{int32_t(i), sr});  // the first rank of a pair wins
  }
  const auto& bt = byte_table();
  for (int b = 0; b < 256; ++b) {
    auto it = sym_index_.find(bt.enc[size_t(b)]);
    byte_sym_[size_t(b)] = it == sym_index_.end() ? -1 : it->second;
  }
}

void BpeTokenizer::encode_text(std::string_view text, bool, std::vector<int32_t>& out) const {
  std::vector<uint32_t> cps = unicode::decode_utf8(text);
  if (opt_.nfc) cps = unicode::nfc(cps);
  if (opt_.prefix_space && (cps.empty() || cps[0] != ' ')) cps.insert(cps.begin(), ' ');
  std::string word;
  for (const Piece& p : pretokenize(cps, opt_.steps)) {
    word.clear();
    for (uint32_t i = p.begin; i < p.end; ++i) unicode::append_utf8(word, cps[i]);
    encode_word(word, out);
  }
}

int32_t BpeTokenizer::intern(const std::string& s) {
  auto [it, fresh] = sym_index_.emplace(s, int32_t(sym_token_.size()));
  if (fresh) sym_token_.push_back(v_.find(s));
  return it->second;
}

void BpeTokenizer::emit(const Sym& s, std::string_view word, std::vector<int32_t>& out) const {
  if (s.sym >= 0 && sym_token_[size_t(s.sym)] >= 0) {
    out.push_back(sym_token_[size_t(s.sym)]);
    return;
  }
  // Not a token: llama.cpp looks up each byte of the byte-level spelling on its own.
  const auto& bt = byte_table();
  for (uint32_t i = s.start; i < s.start + s.len; ++i)
    for (char c : bt.enc[uint8_t(word[i])])
      if (int32_t id = v_.find(std::string_view(&c, 1)); id >= 0) out.push_back(id);
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  const size_t n = word.size();
  if (n == 0) return;
  const auto& bt = byte_table();
  if (opt_.ignore_merges) {
    std::string enc;
    for (char c : word) enc += bt.enc[uint8_t(c)];
    if (int32_t id = v_.find(enc); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<Sym> syms(n);
  for (size_t i = 0; i < n; ++i)
    syms[i] = {byte_sym_[uint8_t(word[i])], int32_t(i) - 1, i + 1 < n ? int32_t(i + 1) : -1, uint32_t(i), 1};
  auto pair_of = [&](int32_t l, int32_t r) -> std::optional<Bigram> {
    int32_t sl = syms[size_t(l)].sym, sr = syms[size_t(r)].sym;
    if (sl < 0 || sr < 0) return std::nullopt;
    auto it = merges_.find(key(sl, sr));
    if (it == merges_.end()) return std::nullopt;
    return Bigram{it->second.rank, l, r, sl, sr, it->second.result};
  };
  auto worse = [](const Bigram& a, const Bigram& b) {  // min-heap on (rank, left)
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  // A queued pair is stale once either side became another symbol.
  auto stale = [](const Bigram& b, const Sym& L, const Sym& R) { return L.sym != b.lsym || R.sym != b.rsym; };
  auto join = [](Sym& L, const Bigram& b) { L.sym = b.result; };
  merge_best_pairs<Bigram>(syms, pair_of, worse, stale, join);
  for (int32_t i = 0; i != -1; i = syms[size_t(i)].next) emit(syms[size_t(i)], word, out);
}

}  // namespace mx::tokenizer_impl
