// Structured outputs: what the token mask costs per decoding step, to read
// against a decode step of the model (bench_decode). For a model directory's
// tokenizer: the vocabulary trie's build time, the schema's compile time, then
// a walk of N steps through a JSON schema (each step: the mask of the state, a
// seeded random pick among the admitted tokens, the matcher advanced), timed
// twice: cold (each state's mask computed) and warm (the same walk again: what a
// repeated schema costs once its states are cached). Prints figures; decides nothing.
//   build/bench_structured MODEL_DIR [--steps N] [--seed S]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "tokenizer/model_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "server/structured_output.h"

using namespace mx;
using Clock = std::chrono::steady_clock;

namespace {

const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 40},
    "age": {"type": "integer"},
    "email": {"type": "string"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 8},
    "address": {"type": "object", "properties": {"street": {"type": "string"}, "zip": {"type": "string", "maxLength": 10}},
                "required": ["street", "zip"]},
    "born": {"type": "string", "format": "date"},
    "score": {"type": "number"}
  },
  "required": ["name", "age", "email", "tags", "address", "born", "score"]
})";

double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

struct Walk {
  std::vector<double> us, apply_us;  // per step: the mask, and setting the masked logits to -inf
  std::string text;
};

Walk walk(grammar::GrammarMasks& masks, int steps, uint32_t seed) {
  Walk w;
  std::mt19937 rng(seed);
  grammar::Matcher m(masks.grammar());
  std::vector<float> logits(masks.vocab().vocab_size(), 0.5f);
  for (int s = 0; s < steps && !m.must_end(); ++s) {
    auto t = Clock::now();
    const auto ok = masks.admitted(m);
    w.us.push_back(us_since(t));
    t = Clock::now();
    grammar::apply_mask(logits.data(), ok->data(), int64_t(logits.size()));  // what GrammarConstraint::mask does
    w.apply_us.push_back(us_since(t));
    std::vector<int32_t> ids;
    for (size_t id = 0; id < ok->size(); ++id)
      if ((*ok)[id]) ids.push_back(int32_t(id));
    if (ids.empty()) break;
    const int32_t id = ids[rng() % ids.size()];
    m.accept_bytes(masks.vocab().piece(id));
    w.text += masks.vocab().piece(id);
  }
  return w;
}

void report(const char* what, std::vector<double> us) {
  if (us.empty()) return;
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double u : us) sum += u;
  std::printf("%-6s %4zu steps: mean %8.1f us, p50 %8.1f, p90 %8.1f, max %9.1f\n", what, us.size(), sum / us.size(),
              us[us.size() / 2], us[us.size() * 9 / 10], us.back());
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int steps = 200;
  uint32_t seed = 1;
  const char* usage = "usage: bench_structured MODEL_DIR [--steps N] [--seed S]\n";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) seed = uint32_t(std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) return std::printf("%s", usage), 0;
    else if (argv[i][0] == '-') return std::fprintf(stderr, "bench_structured: unknown option %s\n%s", argv[i], usage), 2;
    else dir = argv[i];
  }
  if (dir.empty() || steps < 1) return std::fprintf(stderr, "%s", usage), 2;
  try {
    const ModelTokenizer mt = load_model_tokenizer(dir, "");
    const Tokenizer& tok = *mt.tokenizer;
    std::printf("cpu: %s (%s)\n", cpu_model_name().c_str(), cpu_key().c_str());
    auto t = Clock::now();
    auto trie = std::make_shared<const grammar::VocabTrie>(
        server::StructuredOutputs::vocab_pieces(tok, int64_t(tok.vocab_size)));  // as the server builds it
    std::printf("vocabulary %zu tokens: trie built in %.1f ms\n", tok.vocab_size, us_since(t) / 1000);
    t = Clock::now();
    grammar::Grammar g = grammar::json_schema_grammar(nlohmann::ordered_json::parse(kSchema));
    std::printf("schema compiled in %.2f ms (%zu rules)\n", us_since(t) / 1000, g.rule_count());
    grammar::GrammarMasks masks(std::move(g), trie, 100000);
    const Walk cold = walk(masks, steps, seed);
    const Walk warm = walk(masks, steps, seed);
    report("cold", cold.us);
    report("warm", warm.us);
    report("apply", warm.apply_us);
    std::printf("cache: %llu hits, %llu misses\noutput (%zu bytes): %.300s\n", (unsigned long long)masks.cache_hits(),
                (unsigned long long)masks.cache_misses(), cold.text.size(), cold.text.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_structured: %s\n", e.what());
    return 1;
  }
  return 0;
}
