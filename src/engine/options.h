#pragma once
// The engine's settings and the counters it publishes (Engine::metrics, the
// server's /metrics), shared by the Engine façade and its scheduler.
#include <cstdint>
#include <string>

#include "spec/drafter.h"

namespace mx {

struct EngineOptions {
  int kv_blocks = 0;          // 0: enough for max_running full-context sequences, capped at 1 GiB of KV
  int block_size = 16;
  std::string kv_dtype = "auto";  // --kv-dtype (engine/kv_cache.h kv_cache_dtype)
  int max_running = 16;       // requests decoding at once
  int max_queue = 256;        // waiting requests beyond which submit() refuses
  int step_tokens = 256;      // token budget of one forward (decodes + prefill chunks)
  bool prefix_cache = true;
  SpecOptions spec;           // speculative decoding (off by default)
};

struct EngineMetrics {
  int waiting = 0, running = 0;
  int kv_blocks_total = 0, kv_blocks_free = 0, kv_blocks_cached = 0;
  uint64_t prompt_tokens = 0, cached_prompt_tokens = 0, computed_prompt_tokens = 0;
  uint64_t generated_tokens = 0, requests_finished = 0, preemptions = 0, steps = 0;
  // Speculative decoding: verification rounds (decode steps of a sequence that
  // carried drafts), draft tokens verified, and how many of them were accepted.
  // Tokens per round = (accepted + rounds) / rounds.
  uint64_t spec_rounds = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
};

}  // namespace mx
