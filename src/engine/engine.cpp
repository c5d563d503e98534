#include "engine/engine.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace mx {

struct Engine::Request {
  uint64_t id = 0;
  GenerationRequest req;
  TokenCallback cb;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int n_prompt = 0;
  int computed = 0;             // positions whose KV is in kv
  int cached = 0;               // prompt tokens served by the prefix cache at first admission
  bool admitted = false, prompt_cached = false;
  SeqKV kv;
  std::unique_ptr<Sampler> sampler;
  std::vector<int32_t> generated;
};

Engine::Engine(std::unique_ptr<Model> model, const EngineOptions& opts) : model_(std::move(model)), opts_(opts) {
  MX_CHECK(opts_.block_size > 0 && opts_.max_running > 0 && opts_.max_queue >= 0 && opts_.step_tokens > 0,
           "engine: block size, max running and step tokens must be positive");
  const ModelConfig& c = model_->config();
  const KVLayout lay = model_->kv_layout();
  const size_t block_bytes = size_t(lay.n_layers) * (lay.k_width + lay.v_width) * 4 * opts_.block_size;
  int blocks = opts_.kv_blocks;
  if (blocks <= 0) {
    const size_t per_seq = (c.max_position_embeddings + opts_.block_size - 1) / opts_.block_size;
    blocks = int(std::min(per_seq * opts_.max_running, (size_t(1) << 30) / std::max<size_t>(block_bytes, 1)));
    blocks = std::max(blocks, int(per_seq));
  }
  pool_ = std::make_unique<KVPool>(lay, blocks, opts_.block_size);
  cache_ = std::make_unique<PrefixCache>(*pool_);
  logits_.resize(size_t(opts_.step_tokens) * c.vocab_size);
  metrics_.kv_blocks_total = blocks;
}

Engine::~Engine() {
  stop();
  for (auto& r : running_) finish(*r, "abort");
  running_.clear();
}

uint64_t Engine::submit(GenerationRequest req, TokenCallback cb) {
  const ModelConfig& c = model_->config();
  MX_CHECK(!req.prompt.empty(), "the prompt is empty");
  MX_CHECK(req.max_tokens >= 1, "max_tokens must be at least 1");
  for (int32_t t : req.prompt)
    MX_CHECK(t >= 0 && t < c.vocab_size, "token id {} is outside the vocabulary [0, {})", t, c.vocab_size);
  const int64_t total = int64_t(req.prompt.size()) + req.max_tokens;
  MX_CHECK(total <= c.max_position_embeddings,
           "prompt ({} tokens) + max_tokens ({}) = {} exceeds the model's context of {} tokens", req.prompt.size(),
           req.max_tokens, total, c.max_position_embeddings);
  MX_CHECK((total + opts_.block_size - 1) / opts_.block_size <= pool_->n_blocks(),
           "prompt + max_tokens ({} tokens) exceeds the KV cache capacity of {} tokens", total,
           int64_t(pool_->n_blocks()) * opts_.block_size);
  req.sampling.validate();
  auto r = std::make_unique<Request>();
  r->req = std::move(req);
  r->cb = std::move(cb);
  r->tokens = r->req.prompt;
  r->n_prompt = int(r->tokens.size());
  r->sampler = std::make_unique<Sampler>(r->req.sampling, c.vocab_size);
  std::lock_guard<std::mutex> lk(mu_);
  if (int(incoming_.size()) + metrics_.waiting >= opts_.max_queue + opts_.max_running)
    throw QueueFull(fmt::format("the request queue is full ({} waiting)", incoming_.size() + metrics_.waiting));
  r->id = next_id_++;
  const uint64_t id = r->id;
  incoming_.push_back(std::move(r));
  cv_.notify_one();
  return id;
}

void Engine::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  cancelled_.push_back(id);
  cv_.notify_one();
}

void Engine::release_kv(Request& r) {
  r.kv.release(*pool_);
  r.computed = 0;
}

void Engine::finish(Request& r, const std::string& reason) {
  if (opts_.prefix_cache && r.computed > 0) cache_->insert(r.tokens.data(), r.computed, r.kv.blocks);
  release_kv(r);
  TokenEvent ev;
  ev.finished = true;
  ev.finish_reason = reason;
  ev.prompt_tokens = r.n_prompt;
  ev.cached_tokens = r.cached;
  ev.completion_tokens = int(r.generated.size());
  if (r.cb) r.cb(ev);
  std::lock_guard<std::mutex> lk(mu_);
  ++metrics_.requests_finished;
}

void Engine::admit() {
  std::vector<uint64_t> cancelled;
  {
    std::lock_guard<std::mutex> lk(mu_);
    while (!incoming_.empty()) {
      waiting_.push_back(std::move(incoming_.front()));
      incoming_.pop_front();
    }
    cancelled.swap(cancelled_);
  }
  auto is_cancelled = [&](const Request& r) {
    return std::find(cancelled.begin(), cancelled.end(), r.id) != cancelled.end();
  };
  for (auto it = waiting_.begin(); it != waiting_.end();)
    if (is_cancelled(**it)) {
      finish(**it, "abort");
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  for (auto it = running_.begin(); it != running_.end();)
    if (is_cancelled(**it)) {
      finish(**it, "abort");
      it = running_.erase(it);
    } else {
      ++it;
    }
  while (int(running_.size()) < opts_.max_running && !waiting_.empty()) {
    auto r = std::move(waiting_.front());
    waiting_.pop_front();
    if (opts_.prefix_cache) {
      // Keep at least the last token to compute: its logits give the next token.
      const int matched = cache_->match(r->tokens.data(), int(r->tokens.size()), int(r->tokens.size()) - 1,
                                        r->kv.blocks);
      r->kv.n_tokens = r->computed = matched;
      if (!r->admitted) r->cached = std::min(matched, r->n_prompt);
    }
    if (!r->admitted) {
      std::lock_guard<std::mutex> lk(mu_);
      metrics_.prompt_tokens += r->n_prompt;
      metrics_.cached_prompt_tokens += r->cached;
    }
    r->admitted = true;
    running_.push_back(std::move(r));
  }
}

// Grows r's KV to n positions, evicting cached blocks and then preempting the
// newest requests not yet in this step's batch as needed. False if r itself
// had to be preempted.
bool Engine::reserve_or_preempt(Request& r, int n, const std::vector<Request*>& in_batch) {
  for (;;) {
    if (r.kv.reserve(*pool_, n)) return true;
    const int need = (n + pool_->block_size() - 1) / pool_->block_size() - int(r.kv.blocks.size());
    if (cache_->evict(need - pool_->free_blocks()) > 0) continue;
    // Preempt the most recently admitted request outside the batch (possibly r
    // itself): it loses its KV and will be recomputed from its tokens so far.
    auto victim = running_.end() - 1;
    while (victim->get() != &r &&
           std::find(in_batch.begin(), in_batch.end(), victim->get()) != in_batch.end())
      --victim;
    Request& v = **victim;
    if (opts_.prefix_cache && v.computed > 0) cache_->insert(v.tokens.data(), v.computed, v.kv.blocks);
    release_kv(v);
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++metrics_.preemptions;
    }
    const bool self = &v == &r;
    waiting_.push_front(std::move(*victim));
    running_.erase(victim);
    if (self) return false;
  }
}

void Engine::publish_metrics(uint64_t computed_prompt, uint64_t generated) {
  std::lock_guard<std::mutex> lk(mu_);
  metrics_.computed_prompt_tokens += computed_prompt;
  metrics_.generated_tokens += generated;
  metrics_.running = int(running_.size());
  metrics_.waiting = int(waiting_.size());
  metrics_.kv_blocks_free = pool_->free_blocks();
  metrics_.kv_blocks_cached = cache_->cached_blocks();
}

bool Engine::step() {
  admit();
  if (running_.empty()) {
    publish_metrics(0, 0);
    return false;
  }
  const ModelConfig& c = model_->config();
  batch_.clear();
  // Per-step lists live in members so a decode step does not allocate.
  std::vector<Request*>& in_batch = in_batch_;
  std::vector<Request*>& logit_owner = logit_owner_;
  in_batch.clear();
  logit_owner.clear();
  int budget = opts_.step_tokens;
  // Decodes first (one token each), then prefill chunks, in admission order.
  for (int pass = 0; pass < 2 && budget > 0; ++pass) {
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
      Request* r = running_[i].get();
      const int pending = int(r->tokens.size()) - r->computed;
      if (pending <= 0 || (pass == 0) != (pending == 1)) continue;
      const int n = std::min(pending, budget);
      if (!reserve_or_preempt(*r, r->computed + n, in_batch)) break;  // r itself was preempted: it waits
      const bool last = r->computed + n == int(r->tokens.size());
      batch_.add(&r->kv, r->tokens.data() + r->computed, n, r->computed, last);
      in_batch.push_back(r);
      if (last) logit_owner.push_back(r);
      budget -= n;
    }
  }
  if (batch_.tokens.empty()) return !waiting_.empty();
  model_->forward(batch_, *pool_, logits_.data());
  uint64_t computed_prompt = 0;
  for (size_t i = 0; i < in_batch.size(); ++i) {
    Request* r = in_batch[i];
    const int n = batch_.seqs[i].n_tokens;
    if (r->computed < r->n_prompt) computed_prompt += std::min(r->n_prompt, r->computed + n) - r->computed;
    r->computed += n;
    if (opts_.prefix_cache && !r->prompt_cached && r->computed >= r->n_prompt) {
      cache_->insert(r->tokens.data(), r->n_prompt, r->kv.blocks);  // share the prompt while it decodes
      r->prompt_cached = true;
    }
  }
  std::vector<std::pair<Request*, const char*>>& done = done_;
  done.clear();
  for (size_t row = 0; row < logit_owner.size(); ++row) {
    Request* r = logit_owner[row];
    const float* lg = logits_.data() + row * c.vocab_size;
    const int32_t tok = r->sampler->sample(lg, r->generated);
    TokenEvent ev;
    ev.token = tok;
    if (r->req.logprobs > 0) {
      double mx = -INFINITY, s = 0;
      for (int v = 0; v < c.vocab_size; ++v) mx = std::max(mx, double(lg[v]));
      for (int v = 0; v < c.vocab_size; ++v) s += std::exp(double(lg[v]) - mx);
      ev.logprob = float(double(lg[tok]) - mx - std::log(s));
    }
    r->tokens.push_back(tok);
    r->generated.push_back(tok);
    const char* reason = nullptr;
    const bool eos = std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), tok) != c.eos_token_ids.end();
    if ((eos && !r->req.ignore_eos) ||
        std::find(r->req.stop_ids.begin(), r->req.stop_ids.end(), tok) != r->req.stop_ids.end())
      reason = "stop";
    else if (int(r->generated.size()) >= r->req.max_tokens || int(r->tokens.size()) >= c.max_position_embeddings)
      reason = "length";
    ev.prompt_tokens = r->n_prompt;
    ev.cached_tokens = r->cached;
    ev.completion_tokens = int(r->generated.size());
    if (reason) {
      done.emplace_back(r, reason);
    } else if (r->cb) {
      r->cb(ev);
    }
    if (reason && r->cb) {
      ev.finished = true;
      ev.finish_reason = reason;
      r->cb(ev);
      r->cb = nullptr;  // finish() must not send a second final event
    }
  }
  for (const auto& [r, reason] : done) {
    auto it = std::find_if(running_.begin(), running_.end(), [r = r](auto& p) { return p.get() == r; });
    finish(**it, reason);
    running_.erase(it);
  }
  publish_metrics(computed_prompt, logit_owner.size());
  std::lock_guard<std::mutex> lk(mu_);
  ++metrics_.steps;
  return true;
}

void Engine::run_until_idle() {
  for (;;) {
    if (step()) continue;
    std::lock_guard<std::mutex> lk(mu_);
    if (incoming_.empty() && waiting_.empty() && running_.empty()) return;
  }
}

void Engine::start() {
  stop_ = false;
  thread_ = std::thread([this] {
    while (!stop_) {
      if (step()) continue;
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait_for(lk, std::chrono::milliseconds(50),
                   [&] { return stop_ || !incoming_.empty() || !cancelled_.empty(); });
    }
  });
}

void Engine::stop() {
  stop_ = true;
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

EngineMetrics Engine::metrics() const {
  std::lock_guard<std::mutex> lk(mu_);
  EngineMetrics m = metrics_;
  m.waiting += int(incoming_.size());
  return m;
}

}  // namespace mx
