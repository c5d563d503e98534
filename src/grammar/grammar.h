#pragma once
// A context-free grammar over bytes and the pushdown matcher that runs it, for
// constrained decoding (structured outputs: grammar/json_schema.h compiles a JSON
// Schema to one; grammar/token_mask.h turns a matcher state into the set of
// vocabulary tokens that may come next).
//
// The grammar is a set of rules; a rule is a list of alternatives; an
// alternative is a sequence of elements, each a byte set (one input byte in the
// set) or a reference to a rule. The matcher follows llama.cpp's grammar
// sampler (src/llama-grammar.cpp, "advance_stack" / "accept"): its state is the
// set of stacks of positions still to match, one per way the input so far can
// be parsed; each stack's top is a byte set (or the stack is empty: the input so
// far is a complete sentence). Accepting a byte keeps the stacks whose top admits
// it, pops that position and expands rule references until every top is a byte
// set again. Grammars must not be left-recursive and must not repeat a nullable
// rule (both expand forever); the builders here never produce either, and the
// matcher stops with an error past a fixed depth rather than overflow.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mx::grammar {

// 256 bits: the bytes one element admits.
struct ByteSet {
  std::array<uint64_t, 4> w{};
  bool has(uint8_t b) const { return (w[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { w[b >> 6] |= uint64_t(1) << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(uint8_t(b));
  }
  static ByteSet of(uint8_t b) {
    ByteSet s;
    s.add(b);
    return s;
  }
  static ByteSet range(uint8_t lo, uint8_t hi) {
    ByteSet s;
    s.add_range(lo, hi);
    return s;
  }
  ByteSet complement() const {
    ByteSet s;
    for (int i = 0; i < 4; ++i) s.w[i] = ~w[i];
    return s;
  }
};

struct Element {
  enum Kind : uint8_t { Bytes, Rule, End } kind = End;
  uint32_t arg = 0;  // Bytes: index into Grammar::sets; Rule: rule id
};

class Grammar {
 public:
  // At most this many elements and rules (add_alt and add_rule throw past them): a short
  // pattern can ask for far more, ((a{1000}){1000}){1000} a billion elements, which grew a
  // server past 15 GB; a real schema or pattern needs thousands.
  static constexpr size_t kMaxElements = size_t(1) << 20, kMaxRules = size_t(1) << 18;
  // A new rule with no alternatives yet; `name` is for messages and dumps.
  uint32_t add_rule(std::string name);
  // An alternative of `rule`: a sequence of elements (empty: the empty string).
  void add_alt(uint32_t rule, const std::vector<Element>& seq);
  Element bytes(const ByteSet& s);
  static Element ref(uint32_t rule) { return {Element::Rule, rule}; }
  // Elements matching `text` exactly.
  std::vector<Element> literal(std::string_view text);

  void set_root(uint32_t rule) { root_ = rule; }
  // Ends building: a rule "root" deriving seq becomes the root, then check_terminates().
  void finish(const std::vector<Element>& seq) {
    const uint32_t r = add_rule("root");
    add_alt(r, seq);
    set_root(r);
    check_terminates();
  }
  uint32_t root() const { return root_; }
  size_t rule_count() const { return rules_.size(); }
  const std::string& rule_name(uint32_t r) const { return names_[r]; }

  // Flat element storage: each alternative is a run of elements ending in End;
  // alternatives(r) lists their start positions.
  const std::vector<uint32_t>& alternatives(uint32_t r) const { return rules_[r]; }
  const Element& at(uint32_t pos) const { return elems_[pos]; }
  const ByteSet& set(uint32_t i) const { return sets_[i]; }

  // Readable form, one rule per line (tests, debugging).
  std::string dump() const;
  // Throws mx::Error naming a rule that can reach itself without consuming a
  // byte (left recursion, or a repeated nullable rule): the matcher would expand
  // it forever.
  void check_terminates() const;

 private:
  std::vector<Element> elems_;
  std::vector<std::vector<uint32_t>> rules_;
  std::vector<std::string> names_;
  std::vector<ByteSet> sets_;
  uint32_t root_ = 0;
};

// One parse in progress: positions still to match, innermost last.
using Stack = std::vector<uint32_t>;

// The matcher state: every parse of the input so far (sorted, no duplicates).
class Matcher {
 public:
  explicit Matcher(const Grammar& g);  // before any input
  // The state after one more byte; empty stacks() when the byte is not allowed.
  Matcher accept(uint8_t b) const;
  bool accept_bytes(std::string_view s);  // in place; false (state unchanged) if rejected
  bool dead() const { return stacks_.empty(); }
  // The input so far is a complete sentence.
  bool complete() const;
  // No byte may follow (complete, and nothing longer is a sentence).
  bool must_end() const;
  // The bytes some parse admits next.
  ByteSet next_bytes() const;
  const std::vector<Stack>& stacks() const { return stacks_; }
  bool operator==(const Matcher& o) const { return stacks_ == o.stacks_; }

 private:
  Matcher(const Grammar& g, std::vector<Stack> s) : g_(&g), stacks_(std::move(s)) {}
  const Grammar* g_;
  std::vector<Stack> stacks_;
};

}  // namespace mx::grammar
