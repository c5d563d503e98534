#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <optional>

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
  // Speculative decoding: the draft for the next step, its draft
  // distributions (sampled requests), and this step's bookkeeping.
  std::vector<int32_t> draft, verify_tokens;
  std::vector<float> draft_q;
  std::unique_ptr<Sampler> draft_sampler;
  int spec_k = 0;  // draft length to ask for (adaptive: follows acceptance)
  int step_start = 0, step_row = 0;
  std::vector<TokenLogprob> prompt_lp;  // prompt_logprobs: position p + 1's, at p
  bool prompt_scored = false;           // ... sent with the first token
};

TokenLogprob token_logprob(const float* lg, int vocab, int32_t tok, int k) {
  double mx = -INFINITY, s = 0;
  for (int v = 0; v < vocab; ++v) mx = std::max(mx, double(lg[v]));
  for (int v = 0; v < vocab; ++v) s += std::exp(double(lg[v]) - mx);
  const double log_z = mx + std::log(s);
  TokenLogprob out;
  out.logprob = float(double(lg[tok]) - log_z);
  k = std::min(k, vocab);
  if (k > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    for (int v = 0; v < vocab; ++v) ids[size_t(v)] = v;
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [&](int32_t a, int32_t b) { return lg[a] > lg[b] || (lg[a] == lg[b] && a < b); });
    for (int i = 0; i < k; ++i) out.top.push_back({ids[size_t(i)], float(double(lg[ids[size_t(i)]]) - log_z)});
  }
  return out;
}

Engine::Engine(std::unique_ptr<Model> model, const EngineOptions& opts) : model_(std::move(model)), opts_(opts) {
  MX_CHECK(opts_.block_size > 0 && opts_.max_running > 0 && opts_.max_queue >= 0 && opts_.step_tokens > 0,
           "engine: block size, max running and step tokens must be positive");
  const ModelConfig& c = model_->config();
  const KVLayout lay = model_->kv_layout();
  const DType kv_dtype = kv_cache_dtype(opts_.kv_dtype, model_->backend());
  const size_t block_bytes = KVPool::block_bytes(lay, opts_.block_size, kv_dtype);
  int blocks = opts_.kv_blocks;
  if (blocks <= 0) {
    const size_t per_seq = (c.max_position_embeddings + opts_.block_size - 1) / opts_.block_size;
    blocks = int(std::min(per_seq * opts_.max_running, (size_t(1) << 30) / std::max<size_t>(block_bytes, 1)));
    blocks = std::max(blocks, int(per_seq));
  }
  pool_ = std::make_unique<KVPool>(lay, blocks, opts_.block_size, model_->backend(), kv_dtype);
  cache_ = std::make_unique<PrefixCache>(*pool_);
  logits_.resize(size_t(opts_.step_tokens) * c.vocab_size);
  drafter_ = make_drafter(opts_.spec, *model_, *pool_);
  if (drafter_ && drafter_->needs_hidden()) hidden_.resize(size_t(opts_.step_tokens) * c.hidden_size);
  metrics_.kv_blocks_total = blocks;
}

Engine::~Engine() {
  stop();
  for (auto& r : running_) finish(*r, FinishReason::Abort);
  running_.clear();
}

uint64_t Engine::submit(GenerationRequest req, TokenCallback cb) {
  const ModelConfig& c = model_->config();
  MX_CHECK(!req.prompt.empty(), "the prompt is empty");
  MX_CHECK(req.max_tokens >= 1, "max_tokens must be at least 1");
  for (int32_t t : req.prompt)
    MX_CHECK(t >= 0 && t < c.vocab_size, "token id {} is outside the vocabulary [0, {})", t, c.vocab_size);
  const int64_t total = int64_t(req.prompt.size()) + req.max_tokens;
  if (total > c.max_position_embeddings)
    throw ContextTooLong(fmt::format("prompt ({} tokens) + max_tokens ({}) = {} exceeds the model's context of {} "
                                     "tokens", req.prompt.size(), req.max_tokens, total, c.max_position_embeddings));
  if ((total + opts_.block_size - 1) / opts_.block_size > pool_->n_blocks())
    throw ContextTooLong(fmt::format("prompt + max_tokens ({} tokens) exceeds the KV cache capacity of {} tokens",
                                     total, int64_t(pool_->n_blocks()) * opts_.block_size));
  req.sampling.validate();
  auto r = std::make_unique<Request>();
  r->req = std::move(req);
  r->cb = std::move(cb);
  r->tokens = r->req.prompt;
  r->n_prompt = int(r->tokens.size());
  r->sampler = std::make_unique<Sampler>(r->req.sampling, c.vocab_size);
  if (drafter_) {
    r->spec_k = opts_.spec.steps;
    if (!r->req.sampling.greedy()) {
      // Drafts draw from their own stream so the target's RNG stays the request's.
      SamplingParams dp = r->req.sampling;
      dp.seed ^= 0x9e3779b97f4a7c15ull;
      r->draft_sampler = std::make_unique<Sampler>(dp, c.vocab_size);
    }
  }
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
  r.draft.clear();
  r.draft_q.clear();
}

void Engine::finish(Request& r, FinishReason reason, const std::string& error) {
  if (opts_.prefix_cache && r.computed > 0) cache_->insert(r.tokens.data(), r.computed, r.kv.blocks);
  release_kv(r);
  TokenEvent ev;
  ev.finished = true;
  ev.finish_reason = reason;
  ev.error = error;
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
      finish(**it, FinishReason::Abort);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  for (auto it = running_.begin(); it != running_.end();)
    if (is_cancelled(**it)) {
      finish(**it, FinishReason::Abort);
      it = running_.erase(it);
    } else {
      ++it;
    }
  while (int(running_.size()) < opts_.max_running && !waiting_.empty()) {
    auto r = std::move(waiting_.front());
    waiting_.pop_front();
    // A prompt to score is computed in full, once.
    if (opts_.prefix_cache && (r->req.prompt_logprobs < 0 || r->prompt_scored)) {
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

bool Engine::emit_token(Request& r, int32_t tok, const float* lg) {
  const ModelConfig& c = model_->config();
  TokenEvent ev;
  ev.token = tok;
  if (r.req.logprobs > 0) {
    TokenLogprob lp = token_logprob(lg, c.vocab_size, tok, r.req.top_logprobs);
    ev.logprob = lp.logprob;
    ev.top = std::move(lp.top);
  }
  if (r.req.prompt_logprobs >= 0 && !r.prompt_scored) {
    ev.prompt_logprobs = std::move(r.prompt_lp);
    r.prompt_scored = true;
  }
  r.tokens.push_back(tok);
  r.generated.push_back(tok);
  std::optional<FinishReason> reason;
  const bool eos = std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), tok) != c.eos_token_ids.end();
  if ((eos && !r.req.ignore_eos) ||
      std::find(r.req.stop_ids.begin(), r.req.stop_ids.end(), tok) != r.req.stop_ids.end())
    reason = FinishReason::Stop;
  else if (r.req.constraint && (r.req.constraint->accept(tok), r.req.constraint->finished()))
    reason = FinishReason::Stop;  // the structured output is complete
  else if (int(r.generated.size()) >= r.req.max_tokens || int(r.tokens.size()) >= c.max_position_embeddings)
    reason = FinishReason::Length;
  ev.prompt_tokens = r.n_prompt;
  ev.cached_tokens = r.cached;
  ev.completion_tokens = int(r.generated.size());
  if (!reason) {
    if (r.cb) r.cb(ev);
    return true;
  }
  done_.push_back({&r, *reason, {}});
  if (r.cb) {
    ev.finished = true;
    ev.finish_reason = *reason;
    r.cb(ev);
    r.cb = nullptr;  // finish() must not send a second final event
  }
  return false;
}

// One engine step in three stages, split as vLLM (Scheduler.schedule, the model
// runner's execute_model, Scheduler.update_from_output) and sglang
// (get_next_batch_to_run, run_batch, process_batch_result) split theirs:
// schedule (which requests, how many tokens each, their drafts), run_forward
// (the forward on the model's backend), process_outputs (sample or verify,
// emit, finish, draft again).
bool Engine::step() {
  admit();
  if (running_.empty()) {
    publish_metrics(0, 0);
    return false;
  }
  if (!schedule()) return !waiting_.empty();
  if (!run_forward()) {
    publish_metrics(0, 0);
    return true;
  }
  process_outputs();
  return true;
}

// Packs this step's batch_ (decodes with their drafts first, then prefill
// chunks, in admission order, under step_tokens), with in_batch_ and
// logit_owner_; false when nothing fits.
bool Engine::schedule() {
  batch_.clear();
  // Per-step lists live in members so a decode step does not allocate.
  std::vector<Request*>& in_batch = in_batch_;
  in_batch.clear();
  logit_owner_.clear();
  prompt_rows_.clear();
  int budget = opts_.step_tokens, rows = 0;
  // Decodes first (one token each, plus its draft), then prefill chunks, in admission order.
  for (int pass = 0; pass < 2 && budget > 0; ++pass) {
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
      Request* r = running_[i].get();
      const int pending = int(r->tokens.size()) - r->computed;
      if (pending <= 0 || (pass == 0) != (pending == 1)) continue;
      int k = pending == 1 ? std::min(int(r->draft.size()), budget - 1) : 0;
      // Drafts only take free blocks: never evict cached prefixes or preempt for them.
      if (k > 0 && !r->kv.reserve(*pool_, r->computed + 1 + k)) k = 0;
      const int n = k > 0 ? 1 + k : std::min(pending, budget);
      if (!reserve_or_preempt(*r, r->computed + n, in_batch)) break;  // r itself was preempted: it waits
      r->step_start = r->computed;
      r->step_row = int(batch_.tokens.size());
      if (k > 0) {
        r->verify_tokens.assign(1, r->tokens.back());
        r->verify_tokens.insert(r->verify_tokens.end(), r->draft.begin(), r->draft.begin() + k);
        batch_.add(&r->kv, r->verify_tokens.data(), n, r->computed, false);
        for (int j = 0; j < n; ++j) batch_.logit_rows.push_back(r->step_row + j);
        logit_owner_.push_back({r, rows, k});
        rows += n;
      } else {
        // A prefill chunk: the last one gives the sampling row; a prompt being
        // scored (prompt_logprobs) also a row, first, per position whose next token is a prompt token.
        const bool last = r->computed + n == int(r->tokens.size());
        const int scored = r->req.prompt_logprobs >= 0 && !r->prompt_scored
                               ? std::max(0, std::min(r->computed + n, r->n_prompt - 1) - r->computed)
                               : 0;
        batch_.add(&r->kv, r->tokens.data() + r->computed, n, r->computed, false);
        if (scored > 0) prompt_rows_.push_back({r, rows, scored, r->computed});
        for (int j = 0; j < scored; ++j) batch_.logit_rows.push_back(r->step_row + j);
        rows += scored;
        if (last) {
          batch_.logit_rows.push_back(r->step_row + n - 1);
          logit_owner_.push_back({r, rows++, 0});
        }
      }
      in_batch.push_back(r);
      budget -= n;
    }
  }
  return !batch_.tokens.empty();
}

// The scheduled batch through the model, logits_ (and hidden_ for the drafter)
// filled; false when the forward failed (its requests then finished with an error).
bool Engine::run_forward() {
  done_.clear();
  try {
    model_->forward(batch_, *pool_, logits_.data(), hidden_.empty() ? nullptr : hidden_.data());
  } catch (const std::exception& e) {
    // The step's requests fail with the error; the engine and every other request go on.
    for (Request* r : in_batch_)
      done_.push_back({r, FinishReason::Error, std::string("the forward pass failed: ") + e.what()});
    finish_done(in_batch_);
    return false;
  }
  return true;
}

// After the forward: advances each request past what was computed, samples
// (or verifies drafts) from its logits rows, emits tokens, finishes what is
// done, drafts again and publishes the step's metrics.
void Engine::process_outputs() {
  const int V = model_->config().vocab_size;
  std::vector<Request*>& in_batch = in_batch_;
  uint64_t computed_prompt = 0;
  for (size_t i = 0; i < in_batch.size(); ++i) {
    Request* r = in_batch[i];
    const int n = batch_.seqs[i].n_tokens;
    if (int(r->tokens.size()) - r->computed == 1 && n > 1) continue;  // verifying drafts: advanced below
    if (r->computed < r->n_prompt) computed_prompt += std::min(r->n_prompt, r->computed + n) - r->computed;
    r->computed += n;
    if (opts_.prefix_cache && !r->prompt_cached && r->computed >= r->n_prompt) {
      cache_->insert(r->tokens.data(), r->n_prompt, r->kv.blocks);  // share the prompt while it decodes
      r->prompt_cached = true;
    }
  }
  for (const PromptRows& p : prompt_rows_) {
    Request* r = p.r;
    r->prompt_lp.resize(size_t(r->n_prompt - 1));
    for (int j = 0; j < p.count; ++j) {
      const int pos = p.first_pos + j;
      r->prompt_lp[size_t(pos)] = token_logprob(logits_.data() + size_t(p.first_row + j) * V, V,
                                                r->tokens[size_t(pos) + 1], r->req.prompt_logprobs);
    }
  }
  uint64_t generated = 0, rounds = 0, drafted = 0, accepted = 0;
  for (const LogitOwner& o : logit_owner_) {
    Request* r = o.r;
    float* lg = logits_.data() + size_t(o.first_row) * V;
    TokenConstraint* constraint = r->req.constraint.get();
    if (!all_finite(lg, size_t(o.drafts + 1) * V)) {
      // A NaN in the weights or activations (e.g. one poisoned embedding row):
      // this request fails with an error, the server goes on.
      done_.push_back({r, FinishReason::Error, "the model's logits for this request are NaN or infinite"});
      continue;
    }
    if (o.drafts == 0) {
      try {
        if (constraint) constraint->mask(lg, V);
        emit_token(*r, r->sampler->sample(lg, r->generated), lg);
      } catch (const std::exception& e) {
        done_.push_back({r, FinishReason::Error, e.what()});
        continue;
      }
      ++generated;
      continue;
    }
    int emitted = 0, a = 0;
    try {
      a = verify_drafts(
          *r->sampler, lg, {r->draft.data(), size_t(o.drafts)}, r->draft_q.empty() ? nullptr : r->draft_q.data(),
          r->generated,
          [&](int32_t tok, int row) {
            ++emitted;
            return emit_token(*r, tok, lg + size_t(row) * V);
          },
          verify_scratch_,
          // Each row is masked in the state after the tokens emitted before it.
          constraint ? PrepareRow([&](int row) { constraint->mask(lg + size_t(row) * V, V); }) : PrepareRow());
    } catch (const std::exception& e) {
      done_.push_back({r, FinishReason::Error, e.what()});
      continue;
    }
    // Positions computed..computed+a hold the last token and the accepted
    // drafts; the rejected drafts' KV is dropped.
    r->computed += 1 + std::min(a, emitted);
    r->kv.truncate(*pool_, r->computed);
    generated += emitted;
    ++rounds;
    drafted += o.drafts;
    accepted += a;
    if (opts_.spec.adaptive)
      r->spec_k = a == o.drafts ? std::min(opts_.spec.steps, r->spec_k + 1) : std::max(1, a);
  }
  finish_done(in_batch);
  if (drafter_) {
    try {
      draft_next(in_batch);
    } catch (const std::exception& e) {
      for (Request* r : in_batch)
        if (r) done_.push_back({r, FinishReason::Error, std::string("drafting failed: ") + e.what()});
      finish_done(in_batch);
    }
  }
  publish_metrics(computed_prompt, generated);
  std::lock_guard<std::mutex> lk(mu_);
  ++metrics_.steps;
  metrics_.spec_rounds += rounds;
  metrics_.spec_draft_tokens += drafted;
  metrics_.spec_accepted_tokens += accepted;
}

bool Engine::all_finite(const float* v, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i]) && !(std::isinf(v[i]) && v[i] < 0)) return false;  // -inf is a masked logit
  return true;
}

// Finishes the requests in done_ (this step's) and clears their in_batch entries.
void Engine::finish_done(std::vector<Request*>& in_batch) {
  for (const auto& [r, reason, error] : done_) {
    auto it = std::find_if(running_.begin(), running_.end(), [r = r](auto& p) { return p.get() == r; });
    if (it == running_.end()) continue;  // listed twice
    finish(**it, reason, error);
    running_.erase(it);
    std::replace(in_batch.begin(), in_batch.end(), r, static_cast<Request*>(nullptr));
  }
  done_.clear();
}

// Gives every sequence that advanced this step (finished ones are null) its
// next draft; the drafter also sees prefill chunks (the MTP layer's KV).
void Engine::draft_next(const std::vector<Request*>& stepped) {
  const ModelConfig& c = model_->config();
  spec_seqs_.clear();
  for (Request* r : stepped) {
    if (!r) continue;
    SpecSeq s;
    s.tokens = &r->tokens;
    s.kv = &r->kv;
    s.start = r->step_start;
    s.n = r->computed - r->step_start;
    s.hidden_row = r->step_row;
    if (int(r->tokens.size()) == r->computed + 1) {
      // No draft past max_tokens (one more token always comes with the
      // verification) or past the context.
      const int left = r->req.max_tokens - int(r->generated.size()) - 1;
      const int room = c.max_position_embeddings - int(r->tokens.size());
      s.want = std::max(0, std::min({r->spec_k, left, room}));
    }
    s.draft_sampler = r->draft_sampler.get();
    s.draft = &r->draft;
    s.q = &r->draft_q;
    spec_seqs_.push_back(s);
  }
  drafter_->propose(spec_seqs_, hidden_.empty() ? nullptr : hidden_.data());
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
