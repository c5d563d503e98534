#include "grammar/grammar.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace mx::grammar {

uint32_t Grammar::add_rule(std::string name) {
  MX_CHECK(rules_.size() < kMaxRules, "grammar: more than {} rules: the pattern or schema is too large", kMaxRules);
  rules_.emplace_back();
  names_.push_back(std::move(name));
  return uint32_t(rules_.size() - 1);
}

void Grammar::add_alt(uint32_t rule, const std::vector<Element>& seq) {
  MX_CHECK(rule < rules_.size(), "grammar: no rule {}", rule);
  MX_CHECK(elems_.size() + seq.size() < kMaxElements,
           "grammar: more than {} elements: the pattern or schema is too large", kMaxElements);
  rules_[rule].push_back(uint32_t(elems_.size()));
  for (const Element& e : seq) {
    MX_CHECK(e.kind != Element::End, "grammar: End inside an alternative");
    elems_.push_back(e);
  }
  elems_.push_back({Element::End, 0});
}

Element Grammar::bytes(const ByteSet& s) {
  for (size_t i = 0; i < sets_.size(); ++i)
    if (sets_[i].w == s.w) return {Element::Bytes, uint32_t(i)};
  sets_.push_back(s);
  return {Element::Bytes, uint32_t(sets_.size() - 1)};
}

std::vector<Element> Grammar::literal(std::string_view text) {
  std::vector<Element> v;
  for (char c : text) v.push_back(bytes(ByteSet::of(uint8_t(c))));
  return v;
}

namespace {

std::string set_str(const ByteSet& s) {
  std::string o = "[";
  for (int b = 0; b < 256;) {
    if (!s.has(uint8_t(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && s.has(uint8_t(e + 1))) ++e;
    auto ch = [](int c) {
      return c >= 0x21 && c < 0x7f && c != ']' && c != '\\' && c != '-' ? std::string(1, char(c))
                                                                         : fmt::format("\\x{:02x}", c);
    };
    o += ch(b);
    if (e > b) o += "-" + ch(e);
    b = e + 1;
  }
  return o + "]";
}

// Parses in progress past this many nested positions mean a runaway grammar.
constexpr size_t kMaxStack = 4096;
constexpr int kMaxExpansion = 1024;

// Expands rule references at the top of `st` until each resulting stack has a
// byte set on top (or is empty), appending them to out.
void advance(const Grammar& g, Stack st, std::vector<Stack>& out, int depth) {
  if (st.empty()) {
    out.push_back(std::move(st));
    return;
  }
  MX_CHECK(depth < kMaxExpansion && st.size() < kMaxStack,
           "grammar: rule expansion does not terminate (a left-recursive or repeated nullable rule)");
  const uint32_t pos = st.back();
  const Element& e = g.at(pos);
  if (e.kind == Element::Bytes) {
    out.push_back(std::move(st));
    return;
  }
  st.pop_back();
  if (g.at(pos + 1).kind != Element::End) st.push_back(pos + 1);
  for (uint32_t a : g.alternatives(e.arg)) {
    Stack n = st;
    if (g.at(a).kind != Element::End) n.push_back(a);
    advance(g, std::move(n), out, depth + 1);
  }
}

// Parses alive at once past this bound mean an ambiguous grammar whose matcher
// would slow to a crawl (nested anyOf of overlapping schemas): refused.
constexpr size_t kMaxStacks = 1024;

void normalize(std::vector<Stack>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  MX_CHECK(v.size() <= kMaxStacks, "grammar: more than {} parses alive at once (the schema is too ambiguous)",
           kMaxStacks);
}

}  // namespace

std::string Grammar::dump() const {
  std::string o;
  for (size_t r = 0; r < rules_.size(); ++r) {
    o += names_[r] + " ::=";
    for (size_t a = 0; a < rules_[r].size(); ++a) {
      o += a ? " |" : "";
      bool empty = true;
      for (uint32_t p = rules_[r][a]; elems_[p].kind != Element::End; ++p, empty = false)
        o += " " + (elems_[p].kind == Element::Rule ? names_[elems_[p].arg] : set_str(sets_[elems_[p].arg]));
      if (empty) o += " \"\"";
    }
    o += "\n";
  }
  return o;
}

void Grammar::check_terminates() const {
  const size_t n = rules_.size();
  // Nullable rules, by fixed point.
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (uint32_t p : rules_[r]) {
        bool all = true;
        for (; elems_[p].kind != Element::End && all; ++p)
          all = elems_[p].kind == Element::Rule && nullable[elems_[p].arg];
        if (all) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  // r -> s when s can come first in r (after nullable rules only).
  std::vector<std::vector<uint32_t>> first(n);
  for (size_t r = 0; r < n; ++r)
    for (uint32_t p : rules_[r])
      for (; elems_[p].kind == Element::Rule; ++p) {
        first[r].push_back(elems_[p].arg);
        if (!nullable[elems_[p].arg]) break;
      }
  // A cycle in that graph expands forever (iterative DFS, colours 0/1/2).
  std::vector<char> colour(n, 0);
  for (size_t start = 0; start < n; ++start) {
    if (colour[start]) continue;
    std::vector<std::pair<uint32_t, size_t>> st{{uint32_t(start), 0}};
    colour[start] = 1;
    while (!st.empty()) {
      auto& [r, i] = st.back();
      if (i == first[r].size()) {
        colour[r] = 2;
        st.pop_back();
        continue;
      }
      const uint32_t s = first[r][i++];
      if (colour[s] == 1)
        fail("grammar: rule '{}' can reach itself without consuming input (left recursion), so its expansion "
             "does not terminate", names_[s]);
      if (colour[s] == 0) {
        colour[s] = 1;
        st.push_back({s, 0});
      }
    }
  }
}

Matcher::Matcher(const Grammar& g) : g_(&g) {
  MX_CHECK(g.root() < g.rule_count(), "grammar: no root rule");
  for (uint32_t a : g.alternatives(g.root())) {
    Stack s;
    if (g.at(a).kind != Element::End) s.push_back(a);
    advance(g, std::move(s), stacks_, 0);
  }
  normalize(stacks_);
}

Matcher Matcher::accept(uint8_t b) const {
  std::vector<Stack> out;
  for (const Stack& s : stacks_) {
    if (s.empty()) continue;
    const uint32_t pos = s.back();
    if (!g_->set(g_->at(pos).arg).has(b)) continue;
    Stack n(s.begin(), s.end() - 1);
    if (g_->at(pos + 1).kind != Element::End) n.push_back(pos + 1);
    advance(*g_, std::move(n), out, 0);
  }
  normalize(out);
  return Matcher(*g_, std::move(out));
}

bool Matcher::accept_bytes(std::string_view s) {
  Matcher m = *this;
  for (char c : s) {
    m = m.accept(uint8_t(c));
    if (m.dead()) return false;
  }
  *this = std::move(m);
  return true;
}

bool Matcher::complete() const {
  return std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

bool Matcher::must_end() const { return stacks_.size() == 1 && stacks_[0].empty(); }

ByteSet Matcher::next_bytes() const {
  ByteSet u;
  for (const Stack& s : stacks_)
    if (!s.empty()) {
      const ByteSet& t = g_->set(g_->at(s.back()).arg);
      for (int i = 0; i < 4; ++i) u.w[i] |= t.w[i];
    }
  return u;
}

}  // namespace mx::grammar
