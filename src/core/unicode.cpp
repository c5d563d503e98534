#include "core/unicode.h"

#include <algorithm>

#include "core/generated/unicode_tables.h"

namespace mx::unicode {

namespace t = tables;

namespace {

// Index of the run containing cp in a sorted table of run starts.
size_t run_index(const uint32_t* starts, size_t n, uint32_t cp) {
  return size_t(std::upper_bound(starts, starts + n, cp) - starts) - 1;
}

struct Latin1Categories {
  uint8_t v[256];
  Latin1Categories() {
    for (uint32_t c = 0; c < 256; ++c) v[c] = t::kCategoryFlags[run_index(t::kCategoryStart, t::kCategoryCount, c)];
  }
};

uint8_t ccc(uint32_t cp) {
  if (cp < 0x300) return 0;
  return t::kCccValue[run_index(t::kCccStart, t::kCccCount, cp)];
}

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (cp >= 0xC0) {
    const uint32_t* e = t::kDecompCp + t::kDecompCount;
    const uint32_t* it = std::lower_bound(t::kDecompCp, e, cp);
    if (it != e && *it == cp) {
      size_t i = size_t(it - t::kDecompCp);
      out.insert(out.end(), t::kDecompData + t::kDecompOffset[i], t::kDecompData + t::kDecompOffset[i + 1]);
      return;
    }
  }
  out.push_back(cp);
}

// The primary composite of (a, b), or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  size_t lo = 0, hi = t::kCompCount;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    uint64_t k = (uint64_t(t::kCompFirst[mid]) << 32) | t::kCompSecond[mid];
    uint64_t want = (uint64_t(a) << 32) | b;
    if (k < want) lo = mid + 1;
    else if (k > want) hi = mid;
    else return t::kCompResult[mid];
  }
  return 0;
}

}  // namespace

uint8_t category(uint32_t cp) {
  static const Latin1Categories latin1;
  if (cp < 256) return latin1.v[cp];
  if (cp >= 0x110000) return kUndefined;
  return t::kCategoryFlags[run_index(t::kCategoryStart, t::kCategoryCount, cp)];
}

uint32_t to_lower(uint32_t cp) {
  if (cp < 128) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  const uint32_t* e = t::kLowerFrom + t::kLowerCount;
  const uint32_t* it = std::lower_bound(t::kLowerFrom, e, cp);
  return (it != e && *it == cp) ? t::kLowerTo[it - t::kLowerFrom] : cp;
}

uint32_t nfd_first(uint32_t cp) {
  if (cp < 0xC0) return cp;
  size_t n = t::kNfdFirstCount;
  const uint32_t* it = std::upper_bound(t::kNfdFirstBegin, t::kNfdFirstBegin + n, cp);
  if (it == t::kNfdFirstBegin) return cp;
  size_t i = size_t(it - t::kNfdFirstBegin) - 1;
  return cp <= t::kNfdFirstEnd[i] ? t::kNfdFirstValue[i] : cp;
}

std::vector<uint32_t> decode_utf8(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  auto cont = [&](size_t k) { return i + k < n && (p[i + k] & 0xC0) == 0x80; };
  while (i < n) {
    uint8_t b = p[i];
    if (b < 0x80) {
      out.push_back(b);
      i += 1;
    } else if ((b & 0xE0) == 0xC0 && cont(1)) {
      out.push_back((uint32_t(b & 0x1F) << 6) | (p[i + 1] & 0x3F));
      i += 2;
    } else if ((b & 0xF0) == 0xE0 && cont(1) && cont(2)) {
      out.push_back((uint32_t(b & 0x0F) << 12) | (uint32_t(p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F));
      i += 3;
    } else if ((b & 0xF8) == 0xF0 && cont(1) && cont(2) && cont(3)) {
      uint32_t cp = (uint32_t(b & 0x07) << 18) | (uint32_t(p[i + 1] & 0x3F) << 12) |
                    (uint32_t(p[i + 2] & 0x3F) << 6) | (p[i + 3] & 0x3F);
      if (cp > 0x10FFFF) {
        out.push_back(kReplacement);
        i += 1;
      } else {
        out.push_back(cp);
        i += 4;
      }
    } else {
      out.push_back(kReplacement);
      i += 1;
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

std::string encode_utf8(const uint32_t* cps, size_t n) {
  std::string s;
  s.reserve(n);
  for (size_t i = 0; i < n; ++i) append_utf8(s, cps[i]);
  return s;
}

std::vector<uint32_t> nfc(const std::vector<uint32_t>& cps) {
  // Below U+0300 every character is already NFC and never combines.
  if (std::all_of(cps.begin(), cps.end(), [](uint32_t c) { return c < 0x300; })) return cps;

  std::vector<uint32_t> d;
  d.reserve(cps.size() + 8);
  for (uint32_t c : cps) decompose(c, d);

  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < d.size();) {
    if (ccc(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && ccc(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + i, d.begin() + j,
                     [](uint32_t a, uint32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }

  // Canonical composition.
  std::vector<uint32_t> out;
  out.reserve(d.size());
  long starter = -1;  // index in out of the last starter
  int last_ccc = 0;   // class of the last character appended after it
  for (uint32_t c : d) {
    const int cc = ccc(c);
    if (starter >= 0) {
      const bool adjacent = long(out.size()) - 1 == starter;
      const bool blocked = !adjacent && (last_ccc == 0 || last_ccc >= cc);
      if (!blocked) {
        if (uint32_t comp = compose(out[size_t(starter)], c)) {
          out[size_t(starter)] = comp;
          continue;
        }
      }
    }
    if (cc == 0) starter = long(out.size());
    last_ccc = cc;
    out.push_back(c);
  }
  return out;
}

std::string nfc(std::string_view utf8) {
  bool ascii = std::all_of(utf8.begin(), utf8.end(), [](char c) { return uint8_t(c) < 0x80; });
  if (ascii) return std::string(utf8);
  std::vector<uint32_t> c = nfc(decode_utf8(utf8));
  return encode_utf8(c.data(), c.size());
}

const char* data_version() { return t::kUnicodeVersion; }

}  // namespace mx::unicode
