#pragma once
// Structured outputs (OpenAI's response_format): {"type": "json_object"} and
// {"type": "json_schema", "json_schema": {"name", "schema", "strict"}} compiled to
// a grammar (grammar/json_schema.h) over the model's vocabulary, and the
// per-request TokenConstraint the engine masks logits with (sampling/token_constraint.h).
// "text" or no response_format: no constraint.
#include <cstdint>
#include <functional>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sampling/token_constraint.h"
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
  // A grammar the server builds itself (tool calls: server/tool_calls.h),
  // cached under key (build runs on a miss). markers: tag strings a vocabulary
  // may hold as control tokens (GLM's <tool_call>), admitted as their text.
  std::shared_ptr<grammar::GrammarMasks> compile_grammar(const std::string& key,
                                                         const std::function<grammar::Grammar()>& build,
                                                         const std::vector<std::string>& markers);
  // A fresh constraint for one choice. eos: the tokens that end the output where
  // the grammar is complete (empty with ignore_eos: it ends when nothing can follow).
  static std::shared_ptr<TokenConstraint> constraint(std::shared_ptr<grammar::GrammarMasks> g,
                                                     std::vector<int32_t> eos);
  // The bytes each of the first `vocab` ids may contribute to a structured
  // output: its piece, or "" for control, unknown and unused tokens and for ids
  // past the tokenizer's vocabulary (never admitted). Control tokens spelled
  // exactly like one of `markers` keep their text.
  static std::vector<std::string> vocab_pieces(const Tokenizer& tok, int64_t vocab,
                                               const std::vector<std::string>& markers = {});
  // The ids of the control tokens spelled like one of `markers` (their text is shown when they are sampled).
  static std::vector<int32_t> marker_ids(const Tokenizer& tok, const std::vector<std::string>& markers);

 private:
  std::shared_ptr<grammar::GrammarMasks> cached(const std::string& key, const std::function<grammar::Grammar()>& build,
                                                const std::vector<std::string>& markers);
  const Tokenizer& tok_;
  int64_t vocab_;
  std::mutex mu_;
  std::map<std::vector<std::string>, std::shared_ptr<const grammar::VocabTrie>> tries_;  // by markers, built on first use
  std::map<std::string, std::shared_ptr<grammar::GrammarMasks>> cache_;
  std::deque<std::string> order_;  // cache_'s keys, oldest first
};

}  // namespace mx::server
