#pragma once
// Structured outputs (OpenAI's response_format): {"type": "json_object"} and
// {"type": "json_schema", "json_schema": {"name", "schema", "strict"}} compiled to
// a grammar (grammar/json_schema.h) over the model's vocabulary, and the
// per-request TokenConstraint the engine masks logits with (engine/token_constraint.h).
// "text" or no response_format: no constraint.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/token_constraint.h"
#include "grammar/token_mask.h"

namespace mx {
class Tokenizer;
}

namespace mx::server {

class StructuredOutputs {
 public:
  // vocab: the model's vocabulary size (logit rows may be longer than the tokenizer's).
  StructuredOutputs(const Tokenizer& tok, int64_t vocab);
  // The compiled grammar of a response_format object (null for "text"); throws
  // mx::Error naming what is wrong or unsupported. Compiled grammars are cached
  // by their text, so repeated schemas cost a lookup.
  std::shared_ptr<grammar::GrammarMasks> compile(const nlohmann::ordered_json& response_format);
  // A fresh constraint for one choice. eos: the tokens that end the output where
  // the grammar is complete (empty with ignore_eos: it ends when nothing can follow).
  static std::shared_ptr<TokenConstraint> constraint(std::shared_ptr<grammar::GrammarMasks> g,
                                                     std::vector<int32_t> eos);
  // The bytes each of the first `vocab` ids may contribute to a structured
  // output: its piece, or "" for control, unknown and unused tokens and for ids
  // past the tokenizer's vocabulary (never admitted).
  static std::vector<std::string> vocab_pieces(const Tokenizer& tok, int64_t vocab);

 private:
  const grammar::VocabTrie& trie();
  const Tokenizer& tok_;
  int64_t vocab_;
  std::mutex mu_;
  std::shared_ptr<const grammar::VocabTrie> trie_;  // built on first use
  std::map<std::string, std::shared_ptr<grammar::GrammarMasks>> cache_;
};

}  // namespace mx::server
