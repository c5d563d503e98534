#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "formats/gguf.h"
#include "core/json_fields.h"
#include "tokenizer/pretokenize.h"
#include "core/unicode.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace mx {

namespace {

struct SvHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using StrMap = std::unordered_map<std::string, int32_t, SvHash, std::equal_to<>>;

const char* const kSpmSpace = "\xe2\x96\x81";  // U+2581 ▁

bool ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t m; (m = s.find(from, pos)) != std::string::npos; pos = m + from.size()) {
    out.append(s, pos, m - pos);
    out.append(to);
  }
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

// GPT-2's bytes_to_unicode: printable Latin-1 bytes spell themselves, the rest
// map to U+0100.. in byte order.
struct ByteLevelTable {
  std::array<std::string, 256> enc;
  std::unordered_map<uint32_t, uint8_t> dec;
  ByteLevelTable() {
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      uint32_t cp = printable ? b : 256 + n++;
      unicode::append_utf8(enc[b], cp);
      dec[cp] = uint8_t(b);
    }
  }
};
const ByteLevelTable& byte_table() {
  static const ByteLevelTable t;
  return t;
}

// A vocabulary token's bytes under the byte-level mapping (llama.cpp llama_decode_text).
std::string byte_level_decode(const std::string& text) {
  const auto& t = byte_table();
  std::string out;
  for (uint32_t cp : unicode::decode_utf8(text)) {
    auto it = t.dec.find(cp);
    if (it != t.dec.end()) {
      out.push_back(char(it->second));
    } else {
      std::string u;
      unicode::append_utf8(u, cp);
      out += "[UNK_BYTE_0x";
      for (char c : u) out += fmt::format("{:02x}", uint8_t(c));
      out += text + "]";
    }
  }
  return out;
}

// "<0xAB>" -> 0xAB.
std::optional<uint8_t> parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int h = hex(t[3]), l = hex(t[4]);
  if (h < 0 || l < 0) return std::nullopt;
  return uint8_t(h * 16 + l);
}

enum : uint8_t { kLstrip = 1, kRstrip = 2 };

struct Vocab {
  std::vector<std::string> text;
  std::vector<float> score;
  std::vector<TokenType> type;
  std::vector<uint8_t> strip;
  StrMap to_id;
  size_t max_len = 0;

  size_t size() const { return text.size(); }
  int32_t find(std::string_view s) const {
    auto it = to_id.find(s);
    return it == to_id.end() ? -1 : it->second;
  }
  void resize(size_t n) {
    text.resize(n);
    score.assign(n, 0.0f);
    type.assign(n, TokenType::Normal);
    strip.assign(n, 0);
  }
  // Indexes text[i]; a later duplicate wins, as in llama.cpp.
  void index(int32_t i) {
    to_id[text[size_t(i)]] = i;
    max_len = std::max(max_len, text[size_t(i)].size());
  }
};

// Token texts llama.cpp treats as end-of-turn / FIM control tokens even when the
// file marks them otherwise (llama_vocab::impl::load).
const std::string_view kEogNames[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",  // <｜end▁of▁sentence｜>
};
const std::string_view kPromotedControlNames[] = {
    // FIM prefix / suffix / middle / pad / repo / file separator
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
    "<reponame>", "<|file_sep|>",
};

// ---- the parts every model shares: special-token splitting, pieces, decode ----

class BaseTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const override {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    if (add_special) add_prefix(out);
    bool after_special = true;
    for (const Frag& f : partition(text, parse_special)) {
      if (f.token >= 0) {
        out.push_back(f.token);
        after_special = true;
      } else {
        encode_text(text.substr(f.off, f.len), after_special, out);
        after_special = false;
      }
    }
    if (add_special) add_suffix(out);
    return out;
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::string s;
    bool first = true;
    for (int32_t id : ids) {
      check(id);
      TokenType t = v_.type[size_t(id)];
      if (t == TokenType::Control || t == TokenType::Unknown) continue;
      std::string_view p = pieces_[size_t(id)];
      if (first && strip_first_space_ && !p.empty() && p[0] == ' ') p.remove_prefix(1);
      first = false;
      s += p;
    }
    return s;
  }

  std::string token_piece(int32_t id, bool special) const override {
    check(id);
    TokenType t = v_.type[size_t(id)];
    if (!special && (t == TokenType::Control || t == TokenType::Unknown)) return "";
    return pieces_[size_t(id)];
  }

  std::string token_text(int32_t id) const override {
    check(id);
    return v_.text[size_t(id)];
  }

  TokenType token_type(int32_t id) const override {
    check(id);
    return v_.type[size_t(id)];
  }

  float token_score(int32_t id) const override {
    check(id);
    return v_.score[size_t(id)];
  }

  std::optional<int32_t> find_token(std::string_view text) const override {
    int32_t id = v_.find(text);
    if (id < 0) return std::nullopt;
    return id;
  }

  Vocab v_;

  // Call once the vocabulary, types and ids are final.
  void finish() {
    vocab_size = v_.size();
    specials_.clear();
    for (size_t i = 0; i < v_.size(); ++i) {
      TokenType t = v_.type[i];
      if ((t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) &&
          !v_.text[i].empty())
        specials_.push_back(int32_t(i));
    }
    std::stable_sort(specials_.begin(), specials_.end(), [&](int32_t a, int32_t b) {
      return v_.text[size_t(a)].size() > v_.text[size_t(b)].size();
    });
    pieces_.assign(v_.size(), std::string());
    for (size_t i = 0; i < v_.size(); ++i) {
      switch (v_.type[i]) {
        case TokenType::Normal: pieces_[i] = make_piece(int32_t(i)); break;
        case TokenType::Control: case TokenType::Unknown: case TokenType::UserDefined:
          pieces_[i] = v_.text[i];
          break;
        case TokenType::Byte:
          if (auto b = parse_byte_token(v_.text[i])) pieces_[i] = std::string(1, char(*b));
          else pieces_[i] = make_piece(int32_t(i));
          break;
        default: break;  // unused / undefined tokens decode to nothing
      }
    }
    eog_ids.clear();
    for (int32_t id : {eos_id, eot_id, eom_id})
      if (id >= 0) eog_ids.push_back(id);
    for (std::string_view n : kEogNames)
      if (int32_t id = v_.find(n); id >= 0) eog_ids.push_back(id);
    std::sort(eog_ids.begin(), eog_ids.end());
    eog_ids.erase(std::unique(eog_ids.begin(), eog_ids.end()), eog_ids.end());
  }

  // llama.cpp promotes end-of-turn and FIM tokens to control tokens by name.
  void promote_named_controls() {
    auto promote = [&](std::string_view n) {
      if (int32_t id = v_.find(n); id >= 0) v_.type[size_t(id)] = TokenType::Control;
    };
    for (auto n : kEogNames) promote(n);
    for (auto n : kPromotedControlNames) promote(n);
  }

  // ids from metadata out of range are ignored (llama.cpp keeps its default).
  int32_t valid_or(int64_t id, int32_t def) const {
    return (id >= 0 && uint64_t(id) < v_.size()) ? int32_t(id) : def;
  }

 protected:
  bool strip_first_space_ = false;   // SentencePiece: drop the prefixed space when decoding
  std::vector<std::string> pieces_;  // the bytes each token stands for
  std::vector<int32_t> specials_;    // control/user-defined/unknown tokens, longest first

  virtual std::string make_piece(int32_t id) const = 0;  // bytes of a Normal token
  virtual void encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const = 0;
  virtual void add_prefix(std::vector<int32_t>& out) const {
    if (add_bos && bos_id >= 0) out.push_back(bos_id);
  }
  virtual void add_suffix(std::vector<int32_t>& out) const {
    if (add_eos && eos_id >= 0) out.push_back(eos_id);
  }

  void check(int32_t id) const {
    if (id < 0 || size_t(id) >= v_.size()) fail("token id {} is out of range (vocabulary of {} tokens)", id, v_.size());
  }

 private:
  struct Frag {
    int32_t token;  // >= 0: a special token; -1: text [off, off + len)
    size_t off, len;
  };

  // Cuts special tokens out of the text, longest token first, each one at every
  // occurrence in the text that is left (llama.cpp tokenizer_st_partition).
  std::vector<Frag> partition(std::string_view text, bool parse_special) const {
    std::vector<Frag> frags, next;
    if (text.empty()) return frags;
    frags.push_back({-1, 0, text.size()});
    for (int32_t id : specials_) {
      TokenType t = v_.type[size_t(id)];
      if (!parse_special && (t == TokenType::Control || t == TokenType::Unknown)) continue;
      const std::string& st = v_.text[size_t(id)];
      const uint8_t strip = v_.strip[size_t(id)];
      bool changed = false;
      next.clear();
      for (const Frag& f : frags) {
        if (f.token >= 0) {
          next.push_back(f);
          continue;
        }
        size_t off = f.off, len = f.len;
        while (true) {
          size_t m = text.substr(0, off + len).find(st, off);
          if (m == std::string_view::npos) {
            next.push_back({-1, off, len});
            break;
          }
          changed = true;
          size_t left = m - off;
          if (strip & kLstrip)
            while (left > 0 && ascii_space(text[off + left - 1])) --left;
          if (left > 0) next.push_back({-1, off, left});
          next.push_back({id, 0, 0});
          size_t r_off = m + st.size(), r_len = off + len - r_off;
          if (strip & kRstrip)
            while (r_len > 0 && ascii_space(text[r_off])) ++r_off, --r_len;
          if (r_len == 0) break;
          off = r_off;
          len = r_len;
        }
      }
      if (changed) frags.swap(next);
    }
    return frags;
  }
};

// ---- byte-level BPE (GGUF "gpt2", HF tokenizer.json BPE) ----

class BpeTokenizer final : public BaseTokenizer {
 public:
  struct Options {
    std::vector<PreSplit> steps;
    bool ignore_merges = false;  // a word that is a vocabulary token is taken whole (Llama-3)
    bool nfc = false;            // HF normalizer NFC (Qwen2)
    bool prefix_space = false;   // HF ByteLevel add_prefix_space
  };

  // v_ must be filled. merges in rank order.
  void build(Options opt, const std::vector<std::pair<std::string, std::string>>& merges) {
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

 protected:
  std::string make_piece(int32_t id) const override { return byte_level_decode(v_.text[size_t(id)]); }

  void encode_text(std::string_view text, bool, std::vector<int32_t>& out) const override {
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

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // symbol id of the merged string
  };
  struct Sym {
    int32_t sym;  // interned string id, -1 if the string is neither a token nor a merge part
    int32_t prev, next;
    uint32_t start, len;  // bytes of the word
  };
  struct Bigram {
    int32_t rank, left, right, lsym, rsym, result;
  };

  Options opt_;
  StrMap sym_index_;               // every token and merge string -> symbol id
  std::vector<int32_t> sym_token_; // symbol id -> token id or -1
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_sym_{};

  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

  int32_t intern(const std::string& s) {
    auto [it, fresh] = sym_index_.emplace(s, int32_t(sym_token_.size()));
    if (fresh) sym_token_.push_back(v_.find(s));
    return it->second;
  }

  void emit(const Sym& s, std::string_view word, std::vector<int32_t>& out) const {
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

  void encode_word(std::string_view word, std::vector<int32_t>& out) const {
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
    if (n > 1) {
      std::vector<Bigram> heap;
      heap.reserve(n);
      auto worse = [](const Bigram& a, const Bigram& b) {  // min-heap on (rank, left)
        return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
      };
      auto try_add = [&](int32_t l, int32_t r) {
        if (l < 0 || r < 0) return;
        int32_t sl = syms[size_t(l)].sym, sr = syms[size_t(r)].sym;
        if (sl < 0 || sr < 0) return;
        auto it = merges_.find(key(sl, sr));
        if (it == merges_.end()) return;
        heap.push_back({it->second.rank, l, r, sl, sr, it->second.result});
        std::push_heap(heap.begin(), heap.end(), worse);
      };
      for (size_t i = 1; i < n; ++i) try_add(int32_t(i - 1), int32_t(i));
      while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), worse);
        Bigram b = heap.back();
        heap.pop_back();
        Sym& L = syms[size_t(b.left)];
        Sym& R = syms[size_t(b.right)];
        if (L.len == 0 || R.len == 0 || L.next != b.right || L.sym != b.lsym || R.sym != b.rsym) continue;
        L.sym = b.result;
        L.len += R.len;
        R.len = 0;
        L.next = R.next;
        if (R.next >= 0) syms[size_t(R.next)].prev = b.left;
        try_add(L.prev, b.left);
        try_add(b.left, L.next);
      }
    }
    for (int32_t i = 0; i != -1; i = syms[size_t(i)].next) emit(syms[size_t(i)], word, out);
  }
};

// ---- SentencePiece-style BPE by scores (GGUF "llama") ----

class SpmTokenizer final : public BaseTokenizer {
 public:
  SpmTokenizer() { add_space_prefix = true; }

  void build() {
    strip_first_space_ = add_space_prefix;
    for (int b = 0; b < 256; ++b) {
      int32_t id = v_.find(fmt::format("<0x{:02X}>", b));
      if (id < 0) id = v_.find(std::string(1, char(b)));
      byte_tok_[size_t(b)] = id;
    }
  }

 protected:
  std::string make_piece(int32_t id) const override {
    std::string s = v_.text[size_t(id)];
    replace_all(s, kSpmSpace, " ");
    return s;
  }

  void encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const override {
    std::string s;
    if (add_space_prefix && after_special) s = " ";
    s += text;
    replace_all(s, " ", kSpmSpace);

    struct Sym {
      int32_t prev, next;
      uint32_t off, n;
    };
    struct Bigram {
      float score;
      int32_t left, right;
      uint32_t size;
    };
    auto worse = [](const Bigram& a, const Bigram& b) {  // max-heap on score, then min left
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    std::vector<Sym> syms;
    for (size_t off = 0; off < s.size();) {
      uint32_t len = uint32_t(std::min(unicode::utf8_len(uint8_t(s[off])), s.size() - off));
      int32_t idx = int32_t(syms.size());
      off += len;
      syms.push_back({idx - 1, off == s.size() ? -1 : idx + 1, uint32_t(off - len), len});
    }
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
    auto try_add = [&](int32_t l, int32_t r) {
      if (l < 0 || r < 0) return;
      const Sym& a = syms[size_t(l)];
      const Sym& b = syms[size_t(r)];
      int32_t id = v_.find(std::string_view(s).substr(a.off, a.n + b.n));
      if (id < 0) return;
      queue.push({v_.score[size_t(id)], l, r, a.n + b.n});
    };
    for (size_t i = 1; i < syms.size(); ++i) try_add(int32_t(i - 1), int32_t(i));
    while (!queue.empty()) {
      Bigram b = queue.top();
      queue.pop();
      Sym& L = syms[size_t(b.left)];
      Sym& R = syms[size_t(b.right)];
      if (L.n == 0 || R.n == 0 || L.n + R.n != b.size) continue;
      L.n += R.n;
      R.n = 0;
      L.next = R.next;
      if (R.next >= 0) syms[size_t(R.next)].prev = b.left;
      try_add(L.prev, b.left);
      try_add(b.left, L.next);
    }
    if (syms.empty()) return;
    for (int32_t i = 0; i != -1; i = syms[size_t(i)].next) {
      const Sym& y = syms[size_t(i)];
      std::string_view piece = std::string_view(s).substr(y.off, y.n);
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

 private:
  std::array<int32_t, 256> byte_tok_{};
};

// ---- WordPiece (GGUF "bert") ----

class WpmTokenizer final : public BaseTokenizer {
 public:
  bool lowercase = true, strip_accents = true;
  WpmTokenizer() { strip_first_space_ = true; }  // words carry a leading ▁

 protected:
  std::string make_piece(int32_t id) const override {
    std::string s = v_.text[size_t(id)];
    replace_all(s, kSpmSpace, " ");
    return s;
  }

  void add_prefix(std::vector<int32_t>& out) const override {
    if (bos_id >= 0) out.push_back(bos_id);  // [CLS]
  }
  void add_suffix(std::vector<int32_t>& out) const override {
    if (sep_id >= 0) out.push_back(sep_id);  // [SEP]
  }

  static bool is_chinese_char(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) ||
           (c >= 0x2B920 && c <= 0x2CEAF) ||  // sic: HF's Rust code starts this block at 0x2B920
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
  }

  // BERT normalisation and splitting: whitespace separates words, punctuation
  // (and ASCII symbols, CJK ideographs) are words of their own.
  std::vector<std::string> words(std::string_view text) const {
    std::vector<uint32_t> cps = unicode::decode_utf8(text);
    if (strip_accents)
      for (uint32_t& c : cps) c = unicode::nfd_first(c);
    std::vector<std::string> w(1);
    for (uint32_t c : cps) {
      if (unicode::is_whitespace(c)) {
        if (!w.back().empty()) w.emplace_back();
        continue;
      }
      const uint8_t cat = unicode::category(c);
      if (c == 0 || c == unicode::kReplacement || (cat & unicode::kControl)) continue;
      if (strip_accents && (cat & unicode::kMark)) continue;
      std::string s;
      unicode::append_utf8(s, lowercase ? unicode::to_lower(c) : c);
      if ((cat & unicode::kPunct) || (c < 0x7F && (cat & unicode::kSymbol)) || is_chinese_char(c)) {
        if (!w.back().empty()) w.emplace_back();
        w.back() = s;
        w.emplace_back();
      } else {
        w.back() += s;
      }
    }
    if (w.back().empty()) w.pop_back();
    return w;
  }

  void encode_text(std::string_view text, bool, std::vector<int32_t>& out) const override {
    for (const std::string& word : words(text)) {
      if (word.empty()) continue;
      const std::string w1 = kSpmSpace + word;  // word-initial pieces carry ▁ in GGUF BERT vocabs
      const size_t n = w1.size();
      const size_t start = out.size();
      for (size_t i = 0; i < n; ++i) {
        bool matched = false;
        for (size_t j = std::min(n, i + v_.max_len + 1); j > i; --j) {
          int32_t id = v_.find(std::string_view(w1).substr(i, j - i));
          if (id >= 0) {
            out.push_back(id);
            matched = true;
            i = j - 1;
            break;
          }
        }
        if (!matched) {
          out.resize(start);
          break;
        }
      }
      if (out.size() == start && unk_id >= 0) out.push_back(unk_id);
    }
  }
};

// ---- GGUF ----

std::vector<std::pair<std::string, std::string>> split_merges(const std::vector<std::string_view>& m) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(m.size());
  for (std::string_view s : m) {
    size_t sp = s.find(' ', 1);
    if (sp == std::string_view::npos) out.emplace_back(std::string(), std::string());  // never matches
    else out.emplace_back(std::string(s.substr(0, sp)), std::string(s.substr(sp + 1)));
  }
  return out;
}

}  // namespace

bool Tokenizer::is_eog(int32_t id) const { return std::binary_search(eog_ids.begin(), eog_ids.end(), id); }

const std::string& byte_level_char(uint8_t b) { return byte_table().enc[b]; }

std::unique_ptr<Tokenizer> load_tokenizer_gguf(const GgufFile& g) {
  const std::string& path = g.path();
  const std::string model = g.get_string("tokenizer.ggml.model");
  const std::string pre = g.get_string_or("tokenizer.ggml.pre", "");

  std::unique_ptr<BaseTokenizer> tok;
  BpeTokenizer* bpe = nullptr;
  SpmTokenizer* spm = nullptr;
  WpmTokenizer* wpm = nullptr;
  std::optional<GgufPreInfo> pre_info;
  if (model == "gpt2") {
    pre_info = gguf_pre_tokenizer(pre);
    if (!pre_info)
      fail("{}: tokenizer.ggml.pre '{}' is not supported (byte-level BPE pre-tokenizers: gpt-2 family, "
           "starcoder/refact family, llama3 family, qwen2 family, deepseek-coder, deepseek-v3, falcon, default)",
           path, pre);
    if (!g.has("tokenizer.ggml.merges")) fail("{}: gpt2 tokenizer without tokenizer.ggml.merges", path);
    auto b = std::make_unique<BpeTokenizer>();
    bpe = b.get();
    tok = std::move(b);
  } else if (model == "llama") {
    auto s = std::make_unique<SpmTokenizer>();
    spm = s.get();
    tok = std::move(s);
  } else if (model == "bert") {
    auto w = std::make_unique<WpmTokenizer>();
    wpm = w.get();
    tok = std::move(w);
  } else {
    fail("{}: tokenizer.ggml.model '{}' is not supported (supported: gpt2, llama, bert)", path, model);
  }
  tok->model = model;
  tok->pre = pre;

  // vocabulary
  const auto& texts = g.get_string_array("tokenizer.ggml.tokens");
  const size_t n = texts.size();
  if (n == 0) fail("{}: tokenizer.ggml.tokens is empty", path);
  if (n > size_t(INT32_MAX)) fail("{}: tokenizer.ggml.tokens has {} entries, too many", path, n);
  Vocab& v = tok->v_;
  v.resize(n);
  for (size_t i = 0; i < n; ++i)
    v.text[i] = texts[i].empty() ? fmt::format("[EMPTY_{}]", i) : std::string(texts[i]);
  if (g.has("tokenizer.ggml.scores")) {
    std::vector<float> sc = g.get_f32_array("tokenizer.ggml.scores");
    if (sc.size() < n) fail("{}: tokenizer.ggml.scores has {} entries for {} tokens", path, sc.size(), n);
    std::copy(sc.begin(), sc.begin() + long(n), v.score.begin());
  }
  if (g.has("tokenizer.ggml.token_type")) {
    std::vector<int32_t> ty = g.get_i32_array("tokenizer.ggml.token_type");
    if (ty.size() < n) fail("{}: tokenizer.ggml.token_type has {} entries for {} tokens", path, ty.size(), n);
    for (size_t i = 0; i < n; ++i)
      v.type[i] = (ty[i] >= 0 && ty[i] <= 6) ? TokenType(ty[i]) : TokenType::Undefined;
  }
  for (size_t i = 0; i < n; ++i) v.index(int32_t(i));

  // family defaults (llama.cpp), then the file's keys
  if (spm) {
    tok->bos_id = 1, tok->eos_id = 2, tok->unk_id = 0;
    tok->add_bos = true;
    spm->add_space_prefix = g.get_bool_or("tokenizer.ggml.add_space_prefix", true);
  } else if (wpm) {
    tok->bos_id = 101, tok->unk_id = 100, tok->sep_id = 102, tok->pad_id = 0;
    tok->add_bos = true;
    wpm->lowercase = g.get_bool_or("tokenizer.ggml.normalizer.lowercase", true);
    wpm->strip_accents = g.get_bool_or("tokenizer.ggml.normalizer.strip_accents", wpm->lowercase);
  } else {
    tok->add_bos = pre_info->add_bos;
  }
  auto id_key = [&](const char* key, int32_t& id) {
    if (const GgufValue* val = g.find(key))
      id = tok->valid_or(val->as_i64(fmt::format("{}: metadata '{}'", path, key)), id);
  };
  id_key("tokenizer.ggml.bos_token_id", tok->bos_id);
  id_key("tokenizer.ggml.eos_token_id", tok->eos_id);
  id_key("tokenizer.ggml.eot_token_id", tok->eot_id);
  id_key("tokenizer.ggml.eom_token_id", tok->eom_id);
  id_key("tokenizer.ggml.unknown_token_id", tok->unk_id);
  id_key("tokenizer.ggml.seperator_token_id", tok->sep_id);
  id_key("tokenizer.ggml.padding_token_id", tok->pad_id);
  tok->add_bos = g.get_bool_or("tokenizer.ggml.add_bos_token", tok->add_bos);
  tok->add_eos = g.get_bool_or("tokenizer.ggml.add_eos_token", tok->add_eos);
  if (!wpm && tok->add_bos && tok->bos_id < 0) fail("{}: the vocabulary adds BOS but has no bos_token_id", path);
  if (!wpm && tok->add_eos && tok->eos_id < 0) fail("{}: the vocabulary adds EOS but has no eos_token_id", path);

  tok->promote_named_controls();

  if (bpe) {
    BpeTokenizer::Options o;
    o.steps = pre_info->steps;
    o.ignore_merges = pre_info->ignore_merges;
    bpe->build(std::move(o), split_merges(g.get_string_array("tokenizer.ggml.merges")));
  } else if (spm) {
    spm->build();
  }
  tok->finish();

  // Phi-3: llama.cpp strips whitespace after its special tokens (by model name).
  std::string name = g.get_string_or("general.name", "");
  std::transform(name.begin(), name.end(), name.begin(), [](char c) { return char(std::tolower(uint8_t(c))); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (size_t i = 0; i < v.size(); ++i) {
      TokenType t = v.type[i];
      if (t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) v.strip[i] |= kRstrip;
    }
    if (int32_t id = v.find("</s>"); id >= 0) v.strip[size_t(id)] |= kRstrip;
    for (const char* t : {"<unk>", "<s>", "<|endoftext|>"})
      if (int32_t id = v.find(t); id >= 0) v.strip[size_t(id)] &= uint8_t(~kRstrip);
  }
  return tok;
}

std::unique_ptr<Tokenizer> make_spm_tokenizer(SpmVocab in, const std::string& where) {
  const size_t n = in.text.size();
  if (n == 0) fail("{}: the vocabulary is empty", where);
  if (n > size_t(INT32_MAX)) fail("{}: {} tokens is too many", where, n);
  if (in.score.size() != n || in.type.size() != n)
    fail("{}: {} token texts but {} scores and {} types", where, n, in.score.size(), in.type.size());
  auto tok = std::make_unique<SpmTokenizer>();
  tok->model = "llama";
  tok->pre = in.pre;
  Vocab& v = tok->v_;
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

// ---- HF tokenizer.json ----

namespace {

json read_json(const fs::path& p) {
  std::ifstream in(p);
  if (!in) fail("cannot open {}", p.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", p.string(), e.what());
  }
}

std::string type_of(const json& j) { return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : ""; }

// Flattens the pre_tokenizer tree into split steps.
void parse_pre(const json& j, const std::string& where, std::vector<PreSplit>& steps, bool& byte_level,
               bool& prefix_space) {
  if (j.is_null()) return;
  const std::string t = type_of(j);
  if (t == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      fail("{}: Sequence pre_tokenizer without a 'pretokenizers' array", where);
    for (const auto& p : j["pretokenizers"]) parse_pre(p, where, steps, byte_level, prefix_space);
  } else if (t == "ByteLevel") {
    if (byte_level) fail("{}: more than one ByteLevel pre_tokenizer", where);
    byte_level = true;
    const JsonFields f(j, where + ": ByteLevel pre_tokenizer");
    if (f.opt_bool("add_prefix_space", false)) {
      if (!steps.empty())
        fail("{}: ByteLevel add_prefix_space after other pre-tokenizers is not supported", where);
      prefix_space = true;
    }
    if (f.opt_bool("use_regex", true)) steps.push_back(PreSplit::Gpt2);
  } else if (t == "Split") {
    if (byte_level) fail("{}: a Split pre_tokenizer after ByteLevel is not supported", where);
    const JsonFields f(j, where + ": Split pre_tokenizer");
    const json& pat = f.opt_any("pattern");
    if (!pat.is_object() || !pat.contains("Regex") || !pat["Regex"].is_string())
      fail("{}: Split pre_tokenizer needs a {{\"Regex\": ...}} pattern (got {})", where, pat.dump());
    const std::string re = pat["Regex"].get<std::string>();
    const std::string behavior = f.opt_str("behavior", "Isolated");
    if (behavior != "Isolated") fail("{}: Split behavior '{}' is not supported (only Isolated)", where, behavior);
    if (f.opt_bool("invert", false)) fail("{}: inverted Split is not supported", where);
    auto s = pre_split_for_regex(re);
    if (!s)
      fail("{}: Split regex '{}' is not one of the pre-tokenizers mxserve implements (GPT-2, Llama-3, Qwen2, "
           "DeepSeek-Coder, DeepSeek-V3 and digit splits)",
           where, re);
    steps.push_back(*s);
  } else if (t == "Digits") {
    if (byte_level) fail("{}: a Digits pre_tokenizer after ByteLevel is not supported", where);
    steps.push_back(JsonFields(j, where + ": Digits pre_tokenizer").opt_bool("individual_digits", false) ? PreSplit::DigitEach : PreSplit::DigitRun);
  } else {
    fail("{}: pre_tokenizer type '{}' is not supported", where, t.empty() ? j.dump() : t);
  }
}

void check_decoder(const json& j, const std::string& where) {
  if (j.is_null()) return;
  const std::string t = type_of(j);
  if (t == "ByteLevel") return;
  if (t == "Sequence" && j.contains("decoders") && j["decoders"].is_array()) {
    for (const auto& d : j["decoders"]) check_decoder(d, where);
    return;
  }
  fail("{}: decoder type '{}' is not supported (byte-level BPE needs the ByteLevel decoder)", where,
       t.empty() ? j.dump() : t);
}

std::string token_content(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return "";
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_hf(const std::string& tokenizer_json_path) {
  const fs::path path(tokenizer_json_path);
  const json j = read_json(path);
  const fs::path cfg_path = path.parent_path() / "tokenizer_config.json";
  const json cfg = fs::exists(cfg_path) ? read_json(cfg_path) : json();
  return parse_tokenizer_hf(j, cfg, path.string());
}

std::unique_ptr<Tokenizer> parse_tokenizer_hf(const json& j, const json& cfg, const std::string& where) {
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) fail("{}: no 'model' object", where);
  const json& m = j["model"];
  const JsonFields top(j, where), model(m, where + ": model");
  const std::string mtype = type_of(m);
  if (!(mtype == "BPE" || (mtype.empty() && m.contains("merges"))))
    fail("{}: model type '{}' is not supported (only byte-level BPE)", where, mtype);
  if (model.opt_bool("byte_fallback", false)) fail("{}: BPE byte_fallback is not supported (only byte-level BPE)", where);
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && m[k].is_string() && !m[k].get<std::string>().empty())
      fail("{}: BPE {} '{}' is not supported", where, k, m[k].get<std::string>());
  if (m.contains("dropout") && m["dropout"].is_number() && m["dropout"].get<double>() != 0.0)
    fail("{}: BPE dropout is not supported", where);
  if (!m.contains("vocab") || !m["vocab"].is_object()) fail("{}: model.vocab is not an object", where);
  if (!m.contains("merges") || !m["merges"].is_array()) fail("{}: model.merges is not an array", where);

  auto tok = std::make_unique<BpeTokenizer>();
  tok->model = "gpt2";

  // vocabulary: model.vocab plus added_tokens (which may extend it)
  struct Added {
    int64_t id;
    std::string content;
    bool special, lstrip, rstrip;
  };
  std::vector<Added> added;
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const auto& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        fail("{}: added_tokens entry {} needs an integer 'id' and a string 'content'", where, a.dump());
      const JsonFields f(a, where + ": added_tokens entry");
      added.push_back({a["id"].get<int64_t>(), a["content"].get<std::string>(), f.opt_bool("special", false),
                       f.opt_bool("lstrip", false), f.opt_bool("rstrip", false)});
    }
  }
  int64_t max_id = -1;
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      fail("{}: vocab entry '{}' has id {}, not a non-negative integer", where, it.key(), it->dump());
    max_id = std::max(max_id, it->get<int64_t>());
  }
  for (const auto& a : added) {
    if (a.id < 0) fail("{}: added token '{}' has negative id {}", where, a.content, a.id);
    max_id = std::max(max_id, a.id);
  }
  if (max_id < 0) fail("{}: empty vocabulary", where);
  if (max_id >= int64_t(INT32_MAX) || max_id > int64_t(m["vocab"].size() + added.size()) * 4 + 1024)
    fail("{}: token id {} is implausibly large for {} tokens", where, max_id, m["vocab"].size() + added.size());
  Vocab& v = tok->v_;
  v.resize(size_t(max_id + 1));
  std::vector<bool> present(v.size(), false);
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    size_t id = size_t(it->get<int64_t>());
    v.text[id] = it.key();
    present[id] = true;
  }
  for (const auto& a : added) {
    size_t id = size_t(a.id);
    v.text[id] = a.content;
    v.type[id] = a.special ? TokenType::Control : TokenType::UserDefined;
    v.strip[id] = uint8_t((a.lstrip ? kLstrip : 0) | (a.rstrip ? kRstrip : 0));
    present[id] = true;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    if (!present[i] || v.text[i].empty()) {
      v.type[i] = TokenType::Unused;  // a hole in the id space: never produced
      continue;
    }
    v.index(int32_t(i));
  }

  // merges: "a b" strings or ["a", "b"] pairs
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(m["merges"].size());
  for (const auto& e : m["merges"]) {
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) fail("{}: merge '{}' is not two space-separated tokens", where, s);
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      fail("{}: merge {} is neither \"a b\" nor [\"a\", \"b\"]", where, e.dump());
    }
  }

  BpeTokenizer::Options o;
  o.ignore_merges = model.opt_bool("ignore_merges", false);
  // normalizer
  const json& norm = top.opt_any("normalizer");
  if (!norm.is_null()) {
    const std::string t = type_of(norm);
    if (t == "NFC") o.nfc = true;
    else if (!(t == "Sequence" && norm.contains("normalizers") && norm["normalizers"].empty()))
      fail("{}: normalizer '{}' is not supported (only NFC or none)", where, t.empty() ? norm.dump() : t);
  }
  bool byte_level = false;
  parse_pre(top.opt_any("pre_tokenizer"), where, o.steps, byte_level, o.prefix_space);
  if (!byte_level) fail("{}: pre_tokenizer has no ByteLevel step: only byte-level BPE is supported", where);
  check_decoder(top.opt_any("decoder"), where);

  std::string pre = "hf";
  for (PreSplit s : o.steps) {
    switch (s) {
      case PreSplit::Gpt2: pre += ":gpt2"; break;
      case PreSplit::Llama3: pre += ":llama3"; break;
      case PreSplit::Qwen2: pre += ":qwen2"; break;
      case PreSplit::Deepseek3: pre += ":deepseek3"; break;
      default: pre += ":split"; break;
    }
  }
  tok->pre = pre;

  // bos/eos: the post-processor's template, then tokenizer_config.json
  auto id_of = [&](const std::string& text) { return v.find(text); };
  const json& post = top.opt_any("post_processor");
  std::function<void(const json&)> scan_post = [&](const json& p) {
    const std::string t = type_of(p);
    if (t == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
      for (const auto& q : p["processors"]) scan_post(q);
    } else if (t == "TemplateProcessing" && p.contains("single") && p["single"].is_array() && !p["single"].empty()) {
      const json& s = p["single"];
      auto special_id = [&](const json& item) -> int32_t {
        if (!item.is_object() || !item.contains("SpecialToken")) return -1;
        return id_of(JsonFields(item["SpecialToken"], where + ": post_processor SpecialToken").opt_str("id", ""));
      };
      if (int32_t id = special_id(s.front()); id >= 0) tok->bos_id = id, tok->add_bos = true;
      if (s.size() > 1)
        if (int32_t id = special_id(s.back()); id >= 0) tok->eos_id = id, tok->add_eos = true;
    } else if ((t == "RobertaProcessing" || t == "BertProcessing") && p.contains("cls") && p.contains("sep")) {
      if (p["cls"].is_array() && !p["cls"].empty() && p["cls"][0].is_string())
        if (int32_t id = id_of(p["cls"][0].get<std::string>()); id >= 0) tok->bos_id = id, tok->add_bos = true;
      if (p["sep"].is_array() && !p["sep"].empty() && p["sep"][0].is_string())
        if (int32_t id = id_of(p["sep"][0].get<std::string>()); id >= 0) tok->eos_id = id, tok->add_eos = true;
    }
  };
  scan_post(post);
  if (cfg.is_object()) {
    if (cfg.contains("bos_token"))
      if (int32_t id = id_of(token_content(cfg["bos_token"])); id >= 0) tok->bos_id = id;
    if (cfg.contains("eos_token"))
      if (int32_t id = id_of(token_content(cfg["eos_token"])); id >= 0) tok->eos_id = id;
    if (cfg.contains("unk_token"))
      if (int32_t id = id_of(token_content(cfg["unk_token"])); id >= 0) tok->unk_id = id;
    if (cfg.contains("pad_token"))
      if (int32_t id = id_of(token_content(cfg["pad_token"])); id >= 0) tok->pad_id = id;
    if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
      tok->add_bos = cfg["add_bos_token"].get<bool>() && tok->bos_id >= 0;
    if (cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean())
      tok->add_eos = cfg["add_eos_token"].get<bool>() && tok->eos_id >= 0;
  }

  tok->build(std::move(o), merges);
  tok->finish();
  return tok;
}

}  // namespace mx
