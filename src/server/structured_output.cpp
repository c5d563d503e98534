#include "server/structured_output.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "tokenizer/tokenizer.h"

namespace mx::server {

namespace {

using ojson = nlohmann::ordered_json;
// The compiled grammars kept: as many as fit kCacheBytes at each one's most (its grammar, up
// to Grammar::kMaxElements of 8 bytes; GrammarMasks' 512 masks of a byte per token and 65,536
// trie states of 256 ints: 146 MiB with a 152k vocabulary), between 2 and 64. (64 whatever
// their size came to 9 GB.)
constexpr size_t kCacheBytes = size_t(1) << 30;
size_t max_cached_grammars(int64_t vocab) {
  const size_t most = grammar::Grammar::kMaxElements * sizeof(grammar::Element) + 512 * size_t(vocab) + (size_t(64) << 20);
  return std::clamp<size_t>(kCacheBytes / most, 2, 64);
}

class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<grammar::GrammarMasks> g, std::vector<int32_t> eos)
      : g_(std::move(g)), m_(g_->grammar()), eos_(std::move(eos)) {}

  void mask(float* logits, int64_t vocab) override {
    const std::shared_ptr<const std::vector<uint8_t>> ok = g_->admitted(m_);
    const int64_t n = std::min<int64_t>(vocab, int64_t(ok->size()));
    std::vector<float> keep;
    const bool may_end = m_.complete();
    for (int32_t e : eos_) keep.push_back(e >= 0 && e < vocab ? logits[e] : 0.0f);
    grammar::apply_mask(logits, ok->data(), n);
    for (int64_t v = n; v < vocab; ++v) logits[v] = -INFINITY;
    for (size_t i = 0; i < eos_.size(); ++i)
      if (eos_[i] >= 0 && eos_[i] < vocab) logits[eos_[i]] = may_end ? keep[i] : -INFINITY;
  }
  void accept(int32_t token) override {
    const grammar::VocabTrie& v = g_->vocab();
    MX_CHECK(token >= 0 && size_t(token) < v.vocab_size() && !v.piece(token).empty() &&
                 m_.accept_bytes(v.piece(token)),
             "structured output: token {} does not continue the required format", token);
  }
  bool finished() const override { return m_.must_end(); }

 private:
  std::shared_ptr<grammar::GrammarMasks> g_;
  grammar::Matcher m_;
  std::vector<int32_t> eos_;
};

}  // namespace

StructuredOutputs::StructuredOutputs(const Tokenizer& tok, int64_t vocab) : tok_(tok), vocab_(vocab) {}

std::vector<std::string> StructuredOutputs::vocab_pieces(const Tokenizer& tok, int64_t vocab,
                                                         const std::vector<std::string>& markers) {
  std::vector<std::string> pieces(static_cast<size_t>(vocab));
  for (int64_t id = 0; id < vocab && id < int64_t(tok.vocab_size); ++id) {
    const TokenType t = tok.token_type(int32_t(id));
    // Control tokens (end of turn, tool markers ...) are never part of a structured output ...
    if (t == TokenType::Control) {
      // ... unless the grammar spells them (tool-call tags).
      const std::string text = tok.token_piece(int32_t(id), true);
      if (std::find(markers.begin(), markers.end(), text) != markers.end()) pieces[size_t(id)] = text;
      continue;
    }
    if (t == TokenType::Unknown || t == TokenType::Unused) continue;
    pieces[size_t(id)] = tok.token_piece(int32_t(id));
  }
  return pieces;
}

std::vector<int32_t> StructuredOutputs::marker_ids(const Tokenizer& tok, const std::vector<std::string>& markers) {
  std::vector<int32_t> ids;
  for (const std::string& m : markers)
    if (const auto id = tok.find_token(m); id && tok.token_type(*id) == TokenType::Control) ids.push_back(*id);
  return ids;
}

std::shared_ptr<grammar::GrammarMasks> StructuredOutputs::cached(const std::string& key,
                                                                 const std::function<grammar::Grammar()>& build,
                                                                 const std::vector<std::string>& markers) {
  std::shared_ptr<const grammar::VocabTrie> trie;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    std::shared_ptr<const grammar::VocabTrie>& t = tries_[markers];
    if (!t) t = std::make_shared<const grammar::VocabTrie>(vocab_pieces(tok_, vocab_, markers));
    trie = t;
  }
  // Compiled outside the lock: one large pattern takes a while, and held the lock through it
  // every other structured request waited on it.
  // (Two requests for one new grammar may both compile it; the second finds the first's here.)
  auto masks = std::make_shared<grammar::GrammarMasks>(build(), trie);
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;  // compiled meanwhile
  while (!order_.empty() && cache_.size() >= max_cached_grammars(vocab_)) {  // the oldest goes
    cache_.erase(order_.front());
    order_.pop_front();
  }
  cache_[key] = masks;
  order_.push_back(key);
  return masks;
}

std::shared_ptr<grammar::GrammarMasks> StructuredOutputs::compile(const ojson& rf) {
  MX_CHECK(rf.is_object() && rf.contains("type") && rf["type"].is_string(),
           "'response_format' must be an object with a string 'type'");
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return nullptr;
  ojson schema;
  if (type == "json_object") {
    schema = {{"type", "object"}, {"additionalProperties", true}};
  } else if (type == "json_schema") {
    MX_CHECK(rf.contains("json_schema") && rf["json_schema"].is_object(),
             "response_format json_schema needs a 'json_schema' object");
    const ojson& js = rf["json_schema"];
    MX_CHECK(js.contains("schema"), "response_format json_schema needs 'json_schema.schema'");
    for (const char* k : {"name", "description"})
      MX_CHECK(!js.contains(k) || js[k].is_null() || js[k].is_string(), "response_format json_schema.{} must be a string",
               k);
    MX_CHECK(!js.contains("strict") || js["strict"].is_null() || js["strict"].is_boolean(),
             "response_format json_schema.strict must be a boolean");
    schema = js["schema"];
  } else {
    fail("response_format type '{}' is not supported (text, json_object, json_schema)", type);
  }
  return cached("schema " + schema.dump(), [&] { return grammar::json_schema_grammar(schema); }, {});
}

std::shared_ptr<grammar::GrammarMasks> StructuredOutputs::compile_grammar(const std::string& key,
                                                                          const std::function<grammar::Grammar()>& build,
                                                                          const std::vector<std::string>& markers) {
  return cached("server " + key, build, markers);
}

std::shared_ptr<TokenConstraint> StructuredOutputs::constraint(std::shared_ptr<grammar::GrammarMasks> g,
                                                               std::vector<int32_t> eos) {
  return std::make_shared<GrammarConstraint>(std::move(g), std::move(eos));
}

}  // namespace mx::server
