#include "tokenizer/pretokenize.h"

#include <string>

#include "core/unicode.h"

namespace mx {

namespace {

namespace uc = unicode;

// Code points of the text with their category class and White_Space bit.
struct Text {
  const uint32_t* cp;
  std::vector<uint16_t> f;  // category | 0x100 if whitespace
  explicit Text(std::span<const uint32_t> c) : cp(c.data()), f(c.size()) {
    for (size_t i = 0; i < c.size(); ++i)
      f[i] = uint16_t(uc::category(c[i]) | (uc::is_whitespace(c[i]) ? 0x100 : 0));
  }
  bool ws(size_t i) const { return f[i] & 0x100; }
  bool letter(size_t i) const { return f[i] & uc::kLetter; }
  bool number(size_t i) const { return f[i] & uc::kNumber; }
  bool punct(size_t i) const { return f[i] & uc::kPunct; }
  bool newline(size_t i) const { return cp[i] == '\r' || cp[i] == '\n'; }
};

// A matcher returns the length of the match starting at p within [p, e), 0 for none.
using Matcher = size_t (*)(const Text& t, size_t p, size_t e);

inline uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// 's|'t|'re|'ve|'m|'ll|'d, case-sensitive or (?i:...).
size_t contraction(const Text& t, size_t p, size_t e, bool fold) {
  if (t.cp[p] != '\'' || p + 1 >= e) return 0;
  uint32_t a = fold ? ascii_lower(t.cp[p + 1]) : t.cp[p + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (p + 2 >= e) return 0;
  uint32_t b = fold ? ascii_lower(t.cp[p + 2]) : t.cp[p + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// \s+(?!\S)|\s+ at p (p is whitespace), with \s*[\r\n]+ first when `newlines`.
size_t whitespace_tail(const Text& t, size_t p, size_t e, bool newlines) {
  size_t n = 0, last_nl = 0;
  while (p + n < e && t.ws(p + n)) {
    if (newlines && t.newline(p + n)) last_nl = p + n + 1;
    ++n;
  }
  if (last_nl) return last_nl - p;  // \s*[\r\n]+
  if (n >= 2 && p + n < e) return n - 1;  // \s+(?!\S): leave one space for the next word
  return n ? n : 1;
}

size_t m_gpt2(const Text& t, size_t p, size_t e) {
  if (size_t n = contraction(t, p, e, false)) return n;
  const size_t q = p + (t.cp[p] == ' ' ? 1 : 0);
  if (q < e) {
    size_t k = q;
    if (t.letter(q)) {  //  ?\p{L}+
      while (k < e && t.letter(k)) ++k;
      return k - p;
    }
    if (t.number(q)) {  //  ?\p{N}+
      while (k < e && t.number(k)) ++k;
      return k - p;
    }
    if (!t.ws(q)) {  //  ?[^\s\p{L}\p{N}]+
      while (k < e && !t.ws(k) && !t.letter(k) && !t.number(k)) ++k;
      return k - p;
    }
  }
  return whitespace_tail(t, p, e, false);
}

template <size_t MaxDigits>
size_t m_llama3_like(const Text& t, size_t p, size_t e) {
  if (size_t n = contraction(t, p, e, true)) return n;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!t.newline(p) && !t.number(p) && (t.letter(p) || (p + 1 < e && t.letter(p + 1)))) {
    size_t k = p + 1;
    while (k < e && t.letter(k)) ++k;
    return k - p;
  }
  // \p{N}{1,MaxDigits}
  if (t.number(p)) {
    size_t k = p;
    while (k < e && k - p < MaxDigits && t.number(k)) ++k;
    return k - p;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  const size_t q = p + (t.cp[p] == ' ' ? 1 : 0);
  if (q < e && !t.ws(q) && !t.letter(q) && !t.number(q)) {
    size_t k = q;
    while (k < e && !t.ws(k) && !t.letter(k) && !t.number(k)) ++k;
    while (k < e && t.newline(k)) ++k;
    return k - p;
  }
  // \s*[\r\n]+|\s+(?!\S)|\s+
  return whitespace_tail(t, p, e, true);
}

template <bool (Text::*Pred)(size_t) const>
size_t run_of(const Text& t, size_t p, size_t e) {
  size_t k = p;
  while (k < e && (t.*Pred)(k)) ++k;
  return k - p;
}

size_t m_digit_each(const Text& t, size_t p, size_t) { return t.number(p) ? 1 : 0; }
size_t m_digit_run(const Text& t, size_t p, size_t e) { return run_of<&Text::number>(t, p, e); }
size_t m_digits_1_3(const Text& t, size_t p, size_t e) {
  size_t k = p;
  while (k < e && k - p < 3 && t.number(k)) ++k;
  return k - p;
}
size_t m_ascii_3digits(const Text& t, size_t p, size_t e) {
  if (p + 3 > e) return 0;
  for (size_t i = p; i < p + 3; ++i)
    if (t.cp[i] < '0' || t.cp[i] > '9') return 0;
  return 3;
}
size_t m_newline_each(const Text& t, size_t p, size_t) { return t.newline(p) ? 1 : 0; }

template <bool (Text::*Pred)(size_t) const>
size_t m_space_then_run(const Text& t, size_t p, size_t e) {  // \s?X+
  if (t.ws(p) && p + 1 < e && (t.*Pred)(p + 1)) return 1 + run_of<Pred>(t, p + 1, e);
  return run_of<Pred>(t, p, e);
}

// [一-龥ࠀ-一가-퟿]+. llama.cpp runs this one through std::wregex after replacing
// non-ASCII whitespace by U+000B, so the whitespace inside the ranges (U+2000..,
// U+3000, ...) does not match; we keep that.
size_t m_cjk_deepseek_coder(const Text& t, size_t p, size_t e) {
  size_t k = p;
  for (; k < e; ++k) {
    uint32_t c = t.cp[k];
    bool in = (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x0800 && c <= 0x4E00) || (c >= 0xAC00 && c <= 0xD7FF);
    if (!in || t.ws(k)) break;
  }
  return k - p;
}

template <bool Backtick>
size_t m_punct_run(const Text& t, size_t p, size_t e) {  // [\p{P}\$\+<=>\^~\|]+ (+ ` for falcon)
  size_t k = p;
  for (; k < e; ++k) {
    uint32_t c = t.cp[k];
    bool in = t.punct(k) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' ||
              c == '~' || c == '|' || (Backtick && c == '`');
    if (!in) break;
  }
  return k - p;
}

// [一-龥぀-ゟ゠-ヿ]+
size_t m_cjk_deepseek3(const Text& t, size_t p, size_t e) {
  size_t k = p;
  for (; k < e; ++k) {
    uint32_t c = t.cp[k];
    if (!((c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x30FF))) break;
  }
  return k - p;
}

inline bool ascii_letter(uint32_t c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
inline bool ascii_punct_or_symbol(uint32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
}

// DeepSeek-V3's main split. llama.cpp runs it through std::regex on text whose
// non-ASCII characters are replaced by their category, and its ASCII expansion
// of \p{S} lacks '~': TildeIsSymbol = false reproduces that.
template <bool TildeIsSymbol>
size_t m_deepseek3(const Text& t, size_t p, size_t e) {
  auto ps = [&](size_t i) {  // [\p{P}\p{S}]
    if (!TildeIsSymbol && t.cp[i] == '~') return false;
    return (t.f[i] & (uc::kPunct | uc::kSymbol)) != 0;
  };
  auto lm = [&](size_t i) { return (t.f[i] & (uc::kLetter | uc::kMark)) != 0; };
  const uint32_t c = t.cp[p];
  // [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
  if (ascii_punct_or_symbol(c) && p + 1 < e && ascii_letter(t.cp[p + 1])) {
    size_t k = p + 1;
    while (k < e && ascii_letter(t.cp[k])) ++k;
    return k - p;
  }
  // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
  const bool optional_ok = !t.newline(p) && !t.letter(p) && !ps(p);
  size_t from = (optional_ok && p + 1 < e && lm(p + 1)) ? p + 1 : (lm(p) ? p : e);
  if (from < e) {
    size_t k = from;
    while (k < e && lm(k)) ++k;
    return k - p;
  }
  //  ?[\p{P}\p{S}]+[\r\n]*
  const size_t q = p + (c == ' ' ? 1 : 0);
  if (q < e && ps(q)) {
    size_t k = q;
    while (k < e && ps(k)) ++k;
    while (k < e && t.newline(k)) ++k;
    return k - p;
  }
  // \s*[\r\n]+|\s+(?!\S)|\s+
  if (t.ws(p)) return whitespace_tail(t, p, e, true);
  return 0;
}

Matcher matcher(PreSplit s) {
  switch (s) {
    case PreSplit::Gpt2: return m_gpt2;
    case PreSplit::Llama3: return m_llama3_like<3>;
    case PreSplit::Qwen2: return m_llama3_like<1>;
    case PreSplit::DigitEach: return m_digit_each;
    case PreSplit::DigitRun: return m_digit_run;
    case PreSplit::Digits1to3: return m_digits_1_3;
    case PreSplit::Ascii3Digits: return m_ascii_3digits;
    case PreSplit::NewlineEach: return m_newline_each;
    case PreSplit::SpaceLetters: return m_space_then_run<&Text::letter>;
    case PreSplit::SpacePunct: return m_space_then_run<&Text::punct>;
    case PreSplit::CjkDeepseekCoder: return m_cjk_deepseek_coder;
    case PreSplit::PunctRun: return m_punct_run<false>;
    case PreSplit::PunctRunFalcon: return m_punct_run<true>;
    case PreSplit::CjkDeepseek3: return m_cjk_deepseek3;
    case PreSplit::Deepseek3: return m_deepseek3<true>;
    case PreSplit::Deepseek3LlamaCpp: return m_deepseek3<false>;
  }
  return nullptr;
}

const char* const kDeepseek3Regex =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

}  // namespace

const char* pre_split_regex(PreSplit s) {
  switch (s) {
    case PreSplit::Gpt2: return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
    case PreSplit::Llama3:
      return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    case PreSplit::Qwen2:
      return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    case PreSplit::DigitEach: return "\\p{N}";
    case PreSplit::DigitRun: return "\\p{N}+";
    case PreSplit::Digits1to3: return "\\p{N}{1,3}";
    case PreSplit::Ascii3Digits: return "[0-9][0-9][0-9]";
    case PreSplit::NewlineEach: return "[\\r\\n]";
    case PreSplit::SpaceLetters: return "\\s?\\p{L}+";
    case PreSplit::SpacePunct: return "\\s?\\p{P}+";
    case PreSplit::CjkDeepseekCoder: return "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+";
    case PreSplit::PunctRun: return "[\\p{P}\\$\\+<=>\\^~\\|]+";
    case PreSplit::PunctRunFalcon: return "[\\p{P}\\$\\+<=>\\^~\\|`]+";
    case PreSplit::CjkDeepseek3: return "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+";
    case PreSplit::Deepseek3: case PreSplit::Deepseek3LlamaCpp: return kDeepseek3Regex;
  }
  return "";
}

std::vector<Piece> pretokenize(std::span<const uint32_t> cps, std::span<const PreSplit> steps) {
  std::vector<Piece> pieces;
  if (cps.empty()) return pieces;
  pieces.push_back({0, uint32_t(cps.size())});
  if (steps.empty()) return pieces;
  const Text t(cps);
  std::vector<Piece> next;
  for (PreSplit s : steps) {
    const Matcher m = matcher(s);
    next.clear();
    next.reserve(pieces.size() * 2);
    for (const Piece& pc : pieces) {
      size_t p = pc.begin, gap = pc.begin;
      const size_t e = pc.end;
      while (p < e) {
        size_t n = m(t, p, e);
        if (n == 0) {
          ++p;
          continue;
        }
        if (gap < p) next.push_back({uint32_t(gap), uint32_t(p)});
        next.push_back({uint32_t(p), uint32_t(p + n)});
        p += n;
        gap = p;
      }
      if (gap < e) next.push_back({uint32_t(gap), uint32_t(e)});
    }
    pieces.swap(next);
  }
  return pieces;
}

std::optional<GgufPreInfo> gguf_pre_tokenizer(std::string_view pre) {
  using P = PreSplit;
  auto any = [&](std::initializer_list<std::string_view> names) {
    for (auto n : names)
      if (pre == n) return true;
    return false;
  };
  GgufPreInfo r;
  if (pre.empty() || pre == "default") {
    r.steps = {P::PunctRun, P::Gpt2, P::DigitRun, P::Ascii3Digits};
  } else if (any({"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
                  "a.x-4.0", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt",
                  "olmo", "jais", "trillion", "granite-docling", "exaone4"})) {
    r.steps = {P::Gpt2};
  } else if (any({"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
                  "mellum2"})) {
    r.steps = {P::DigitEach, P::Gpt2};
  } else if (any({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                  "jina-v5-nano"})) {
    r.steps = {P::Llama3};
    r.ignore_merges = true;
    r.add_bos = true;
  } else if (any({"dbrx", "smaug-bpe", "glm4", "chatglm-bpe"})) {
    r.steps = {P::Llama3};
  } else if (any({"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "hunyuan", "solar-open",
                  "megrez"})) {
    r.steps = {P::Qwen2};
  } else if (pre == "deepseek-coder") {
    r.steps = {P::NewlineEach, P::SpaceLetters, P::SpacePunct, P::CjkDeepseekCoder, P::DigitEach};
  } else if (any({"deepseek-v3", "hunyuan-dense", "joyai-llm"})) {
    r.steps = {P::Digits1to3, P::CjkDeepseek3, P::Deepseek3LlamaCpp};
  } else if (pre == "falcon") {
    r.steps = {P::PunctRunFalcon, P::Gpt2, P::Ascii3Digits};
  } else {
    return std::nullopt;
  }
  return r;
}

std::optional<PreSplit> pre_split_for_regex(std::string_view pattern_in) {
  using P = PreSplit;
  // tokenizer.json spells CR/LF either as regex escapes or as the characters.
  std::string canon;
  for (char c : pattern_in) canon += c == '\r' ? std::string("\\r") : c == '\n' ? std::string("\\n") : std::string(1, c);
  const std::string_view pattern = canon;
  static const std::pair<std::string_view, P> known[] = {
      {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", P::Gpt2},
      {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", P::Gpt2},
      {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
       "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
       P::Llama3},
      {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
       "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
       P::Llama3},
      {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
       "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
       P::Qwen2},
      {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
       "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
       P::Qwen2},
      {"\\p{N}", P::DigitEach},
      {"\\p{N}+", P::DigitRun},
      {"\\p{N}{1,3}", P::Digits1to3},
      {"[0-9][0-9][0-9]", P::Ascii3Digits},
      {"[\\r\\n]", P::NewlineEach},
      {"\\s?\\p{L}+", P::SpaceLetters},
      {"\\s?\\p{P}+", P::SpacePunct},
      {"[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", P::CjkDeepseekCoder},
      {"[\\p{P}\\$\\+<=>\\^~\\|]+", P::PunctRun},
      {"[\\p{P}\\$\\+<=>\\^~\\|`]+", P::PunctRunFalcon},
      {"[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+", P::CjkDeepseek3},
      {kDeepseek3Regex, P::Deepseek3},
  };
  for (const auto& [re, s] : known)
    if (pattern == re) return s;
  return std::nullopt;
}

}  // namespace mx
