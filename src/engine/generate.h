#pragma once
// Single-sequence generation: prefill the prompt in chunks, then decode one token
// per step until EOS, a stop id, or max_tokens. The serving engine batches many
// of these; this is the plain loop the CLI and the golden tests use.
#include <functional>
#include <string>
#include <vector>

#include "engine/finish_reason.h"
#include "sampling/sampling.h"
#include "models/model.h"

namespace mx {


struct GenerateOptions {
  int max_tokens = 256;
  SamplingParams sampling;
  bool ignore_eos = false;
  int prefill_chunk = 512;  // tokens per prefill forward
  std::string kv_dtype = "auto";  // engine/kv_cache.h kv_cache_dtype
};

struct GenerateResult {
  std::vector<int32_t> tokens;
  FinishReason finish_reason = FinishReason::Length;  // Stop (EOS) or Length; mxserve generate's engine path: any
  std::string error;  // FinishReason::Error: what failed (only from the engine)
  double prefill_seconds = 0, decode_seconds = 0;
  int prompt_tokens = 0;
};

GenerateResult generate(Model& model, const std::vector<int32_t>& prompt,
                        const GenerateOptions& opts,
                        const std::function<void(int32_t)>& on_token = {});


// Logits of the last prompt position, or of every position ([n, vocab]), with
// the prompt run in chunks of `chunk` tokens, over a KV cache of `kv_dtype`
// (engine/kv_cache.h; auto: the one serving uses).
std::vector<float> prompt_logits(Model& model, const std::vector<int32_t>& prompt,
                                 bool all_positions = false, int chunk = 512, const std::string& kv_dtype = "auto");

// Parses "1 2 3" or "1,2,3" into ids; throws mx::Error on anything else.
std::vector<int32_t> parse_token_ids(const std::string& s);

}  // namespace mx
