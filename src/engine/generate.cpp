#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "engine/kv_cache.h"  // kv_cache_dtype

namespace mx {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs the prompt through the model in chunks. Writes the last position's logits,
// or with all_positions every position's, [n, vocab], to `logits`.
void prefill(Model& model, KVPool& pool, SeqKV& kv, const std::vector<int32_t>& prompt, int chunk,
             float* logits, bool all_positions = false) {
  Batch b;
  const int n = int(prompt.size());
  const size_t V = size_t(model.config().vocab_size);
  for (int s = 0; s < n; s += chunk) {
    const int len = std::min(chunk, n - s);
    b.clear();
    b.add(&kv, prompt.data() + s, len, s, s + len == n);
    if (all_positions) {
      b.logit_rows.clear();
      for (int i = 0; i < len; ++i) b.logit_rows.push_back(i);
    }
    model.forward(b, pool, all_positions ? logits + size_t(s) * V : logits);
  }
}

int blocks_for(int tokens, int bs) { return (tokens + bs - 1) / bs; }

// The loop every generate() shares: check the request, prefill(), then pick a
// token and step() it until EOS or max_tokens. prefill() and step(tok) leave the
// next logits where pick(history) reads them.
GenerateResult run_generation(const ModelConfig& c, const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                              const std::function<void(int32_t)>& on_token, const std::function<void()>& prefill,
                              const std::function<void(int32_t)>& step,
                              const std::function<int32_t(const std::vector<int32_t>&)>& pick) {
  MX_CHECK(!prompt.empty(), "the prompt is empty");
  MX_CHECK(opts.max_tokens >= 0, "max_tokens must be non-negative");
  MX_CHECK(opts.prefill_chunk > 0, "prefill chunk must be positive");
  opts.sampling.validate();
  const int total = int(prompt.size()) + opts.max_tokens;
  MX_CHECK(total <= c.max_position_embeddings,
           "prompt ({} tokens) + max_tokens ({}) = {} exceeds the model's context of {} tokens",
           prompt.size(), opts.max_tokens, total, c.max_position_embeddings);
  GenerateResult r;
  r.prompt_tokens = int(prompt.size());
  r.finish_reason = FinishReason::Length;
  r.tokens.reserve(opts.max_tokens);
  auto t0 = Clock::now();
  if (opts.max_tokens == 0) return r;
  prefill();
  r.prefill_seconds = since(t0);

  t0 = Clock::now();
  for (int i = 0; i < opts.max_tokens; ++i) {
    const int32_t tok = pick(r.tokens);
    r.tokens.push_back(tok);
    if (on_token) on_token(tok);
    if (!opts.ignore_eos &&
        std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), tok) != c.eos_token_ids.end()) {
      r.finish_reason = FinishReason::Stop;
      break;
    }
    if (i + 1 == opts.max_tokens) break;
    step(tok);
  }
  r.decode_seconds = since(t0);
  return r;
}
}  // namespace

GenerateResult generate(Model& model, const std::vector<int32_t>& prompt,
                        const GenerateOptions& opts, const std::function<void(int32_t)>& on_token) {
  const ModelConfig& c = model.config();
  std::unique_ptr<KVPool> pool;  // sized in prefill, once the request is known to be valid
  SeqKV kv;
  std::vector<float> logits(c.vocab_size);
  Sampler sampler(opts.sampling, c.vocab_size);
  Batch b;
  return run_generation(
      c, prompt, opts, on_token,
      [&] {
        const int bs = 16, total = int(prompt.size()) + opts.max_tokens;
        pool = std::make_unique<KVPool>(model.kv_layout(), blocks_for(total, bs), bs, model.backend(),
                                        kv_cache_dtype(opts.kv_dtype, model));
        MX_CHECK(kv.reserve(*pool, total), "KV pool too small");
        prefill(model, *pool, kv, prompt, opts.prefill_chunk, logits.data());
      },
      [&](int32_t tok) {
        b.clear();
        b.add(&kv, &tok, 1, kv.n_tokens, true);
        model.forward(b, *pool, logits.data());
      },
      [&](const std::vector<int32_t>& history) { return sampler.sample(logits.data(), history); });
}

std::vector<float> prompt_logits(Model& model, const std::vector<int32_t>& prompt,
                                 bool all_positions, int chunk, const std::string& kv_dtype) {
  const ModelConfig& c = model.config();
  MX_CHECK(!prompt.empty(), "the prompt is empty");
  MX_CHECK(int(prompt.size()) <= c.max_position_embeddings,
           "prompt of {} tokens exceeds the model's context of {} tokens", prompt.size(),
           c.max_position_embeddings);
  const int bs = 16;
  KVPool pool(model.kv_layout(), blocks_for(int(prompt.size()), bs), bs, model.backend(),
              kv_cache_dtype(kv_dtype, model));
  SeqKV kv;
  MX_CHECK(kv.reserve(pool, int(prompt.size())), "KV pool too small");
  std::vector<float> logits(size_t(c.vocab_size) * (all_positions ? prompt.size() : 1));
  prefill(model, pool, kv, prompt, chunk, logits.data(), all_positions);
  return logits;
}

std::vector<int32_t> parse_token_ids(const std::string& s) {
  std::vector<int32_t> ids;
  const char* p = s.c_str();
  while (*p) {
    if (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') {
      ++p;
      continue;
    }
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(p, &end, 10);
    if (end == p || errno || v < 0 || v > INT32_MAX || (*end && !strchr(" ,\t\n", *end)))
      fail("'{}' is not a list of token ids (non-negative integers separated by spaces or commas)", s);
    ids.push_back(int32_t(v));
    p = end;
  }
  if (ids.empty()) fail("no token ids given");
  return ids;
}

}  // namespace mx
