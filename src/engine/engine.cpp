#include "engine/engine.h"

#include <algorithm>

#include "core/error.h"

namespace mx {

Engine::Engine(std::unique_ptr<Model> model, const EngineOptions& opts) : model_(std::move(model)), opts_(opts) {
  MX_CHECK(opts_.block_size > 0 && opts_.max_running > 0 && opts_.max_queue >= 0 && opts_.step_tokens > 0,
           "engine: block size, max running and step tokens must be positive");
  const ModelConfig& c = model_->config();
  const KVLayout lay = model_->kv_layout();
  const DType kv_dtype = kv_cache_dtype(opts_.kv_dtype, *model_);
  const size_t block_bytes = KVPool::block_bytes(lay, opts_.block_size, kv_dtype);
  int blocks = opts_.kv_blocks;
  if (blocks <= 0) {
    const size_t per_seq = (c.max_position_embeddings + opts_.block_size - 1) / opts_.block_size;
    blocks = int(std::min(per_seq * opts_.max_running, (size_t(1) << 30) / std::max<size_t>(block_bytes, 1)));
    blocks = std::max(blocks, int(per_seq));
  }
  pool_ = std::make_unique<KVPool>(lay, blocks, opts_.block_size, model_->backend(), kv_dtype);
  cache_ = std::make_unique<PrefixCache>(*pool_);
  drafter_ = make_drafter(opts_.spec, *model_, *pool_);
  scheduler_ = std::make_unique<Scheduler>(opts_, *pool_, *cache_);
  runner_ = std::make_unique<ModelRunner>(*model_, *pool_, opts_.step_tokens, drafter_ && drafter_->needs_hidden());
  outputs_ = std::make_unique<OutputProcessor>(opts_, c, *pool_, *cache_, *scheduler_, drafter_.get());
}

Engine::~Engine() {
  stop();
  scheduler_->abort_running();
}

uint64_t Engine::submit(GenerationRequest req, TokenCallback cb) {
  const ModelConfig& c = model_->config();
  MX_CHECK(!req.prompt.empty(), "the prompt is empty");
  MX_CHECK(req.max_tokens >= 1, "max_tokens must be at least 1");
  for (int32_t t : req.prompt)
    MX_CHECK(t >= 0 && t < c.vocab_size, "token id {} is outside the vocabulary [0, {})", t, c.vocab_size);
  for (int32_t t : req.stop_ids)  // one that can never be sampled would be a stop condition silently dropped
    MX_CHECK(t >= 0 && t < c.vocab_size, "stop token id {} is outside the vocabulary [0, {})", t, c.vocab_size);
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
  if (drafter_) r->spec = drafter_->start(r->req.sampling);
  return scheduler_->add(std::move(r));
}

void Engine::cancel(uint64_t id) { scheduler_->cancel(id); }

// One engine step: the scheduler plans it, the runner runs the forward, the
// output stage samples or verifies, emits, finishes and drafts again.
bool Engine::step() {
  scheduler_->admit();
  if (!scheduler_->has_running()) {
    scheduler_->publish({});
    return false;
  }
  if (!scheduler_->schedule(plan_)) return scheduler_->has_waiting();
  if (auto error = runner_->execute(plan_)) {
    outputs_->fail(plan_, *error);
    scheduler_->publish({});
    return true;
  }
  outputs_->process(plan_, *runner_);
  return true;
}

void Engine::run_until_idle() {
  for (;;) {
    if (step()) continue;
    if (scheduler_->idle()) return;
  }
}

void Engine::start() {
  stop_ = false;
  thread_ = std::thread([this] {
    while (!stop_) {
      if (step()) continue;
      scheduler_->wait_for_work(stop_, 50);
    }
  });
}

void Engine::stop() {
  stop_ = true;
  scheduler_->wake();
  if (thread_.joinable()) thread_.join();
}

EngineMetrics Engine::metrics() const { return scheduler_->metrics(); }

}  // namespace mx
