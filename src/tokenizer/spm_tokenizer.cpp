#include "tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "core/error.h"
#include "core/unicode.h"
#include "tokenizer/symbol_merge.h"

namespace mx::tokenizer_impl {

void SpmTokenizer::build() {
  strip_first_space_ = add_space_prefix;
  for (int b = 0; b < 256; ++b) {
    int32_t id = v_.find(fmt::format("<0x{:02X}>", b));
    if (id < 0) id = v_.find(std::string(1, char(b)));
    byte_tok_[size_t(b)] = id;
  }
}

void SpmTokenizer::encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const {
  std::string s;
  if (add_space_prefix && after_special) s = " ";
  s += text;
  replace_all(s, " ", kSpmSpace);

  struct Sym {
    int32_t prev, next;
    uint32_t start, len;  // bytes of s
  };
  struct Bigram {
    float score;
    int32_t left, right;
    uint32_t size;
  };
  std::vector<Sym> syms;  // one per UTF-8 character
  for (size_t off = 0; off < s.size();) {
    uint32_t len = uint32_t(std::min(unicode::utf8_len(uint8_t(s[off])), s.size() - off));
    int32_t idx = int32_t(syms.size());
    off += len;
    syms.push_back({idx - 1, off == s.size() ? -1 : idx + 1, uint32_t(off - len), len});
  }
  auto pair_of = [&](int32_t l, int32_t r) -> std::optional<Bigram> {
    const Sym& a = syms[size_t(l)];
    const Sym& b = syms[size_t(r)];
    int32_t id = v_.find(std::string_view(s).substr(a.start, a.len + b.len));
    if (id < 0) return std::nullopt;
    return Bigram{v_.score[size_t(id)], l, r, a.len + b.len};
  };
  auto worse = [](const Bigram& a, const Bigram& b) {  // max-heap on score, then min left
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  // A queued pair is stale once either side grew.
  auto stale = [](const Bigram& b, const Sym& L, const Sym& R) { return L.len + R.len != b.size; };
  merge_best_pairs<Bigram>(syms, pair_of, worse, stale, [](Sym&, const Bigram&) {});
  if (syms.empty()) return;
  for (int32_t i = 0; i != -1; i = syms[size_t(i)].next) {
    const Sym& y = syms[size_t(i)];
    std::string_view piece = std::string_view(s).substr(y.start, y.len);
    if (int32_t id = v_.find(piece); id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : piece) {  // byte fallback
      int32_t id = byte_tok_[uint8_t(c)];
      if (id < 0) id = unk_id;
      if (id >= 0) out.push_back(id);
    }
  }
}

}  // namespace mx::tokenizer_impl

namespace mx {

std::unique_ptr<Tokenizer> make_spm_tokenizer(SpmVocab in, const std::string& where) {
  const size_t n = in.text.size();
  if (n == 0) fail("{}: the vocabulary is empty", where);
  if (n > size_t(INT32_MAX)) fail("{}: {} tokens is too many", where, n);
  if (in.score.size() != n || in.type.size() != n)
    fail("{}: {} token texts but {} scores and {} types", where, n, in.score.size(), in.type.size());
  auto tok = std::make_unique<tokenizer_impl::SpmTokenizer>();
  tok->model = "llama";
  tok->pre = in.pre;
  tokenizer_impl::Vocab& v = tok->v_;
  v.resize(n);
  for (size_t i = 0; i < n; ++i) {
    v.text[i] = in.text[i].empty() ? fmt::format("[EMPTY_{}]", i) : std::move(in.text[i]);
    v.score[i] = in.score[i];
    v.type[i] = in.type[i];
  }
  for (size_t i = 0; i < n; ++i) v.index(int32_t(i));
  tok->bos_id = tok->valid_or(in.bos_id, -1);
  tok->eos_id = tok->valid_or(in.eos_id, -1);
  tok->unk_id = tok->valid_or(in.unk_id, -1);
  tok->add_bos = in.add_bos;
  if (tok->add_bos && tok->bos_id < 0) fail("{}: the vocabulary adds BOS but has no BOS token", where);
  tok->add_space_prefix = in.add_space_prefix;
  tok->build();
  tok->finish();
  return tok;
}

}  // namespace mx
