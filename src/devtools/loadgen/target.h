#pragma once
// What a load generator sends requests to: an OpenAI-compatible endpoint over
// HTTP (ours or another engine's) or an Engine in this process.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "devtools/loadgen/workload.h"

namespace mx {
class Engine;
}

namespace mx::bench {

struct RequestResult {
  bool ok = false;
  std::string error;
  double start_s = 0;               // send time, from the start of the point
  double ttft_s = 0, e2e_s = 0;     // first token / last token after send
  std::vector<double> itl_s;        // gaps between consecutive token arrivals (a chunk of k tokens: k gaps, 1 non-zero)
  int prompt_tokens = 0, cached_tokens = 0, output_tokens = 0;
  // Stream events that carried tokens (-1: not counted). Token timing holds only
  // when every token came in an event of its own: token_events == output_tokens.
  int token_events = -1;
  bool timed() const { return token_events < 0 || token_events == output_tokens; }
};

// Prometheus sample lines "name{labels} value" -> value (comments skipped,
// malformed lines ignored).
std::map<std::string, double> parse_prometheus(const std::string& text);

class Target {
 public:
  virtual ~Target() = default;
  // Blocking; called from many threads at once. Never throws: failures are
  // RequestResult::ok = false with the reason.
  virtual RequestResult send(const BenchRequest& r) = 0;
  // Counters for the prefix-cache hit rate and spec acceptance, in the names
  // of mxserve's /metrics (empty when the endpoint has none).
  virtual std::map<std::string, double> counters() = 0;
  virtual std::string describe() const = 0;
  virtual int vocab_size() const = 0;  // 0: unknown
};

// url: http://host:port; model "" asks /v1/models for the first id. mx::Error
// when the endpoint does not answer.
std::unique_ptr<Target> http_target(const std::string& url, const std::string& model, int vocab_size);
// engine must be started (Engine::start) and outlive the target.
std::unique_ptr<Target> engine_target(Engine& engine);

}  // namespace mx::bench
