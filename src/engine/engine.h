#pragma once
// The serving engine: continuous batching over one model. Each step packs the
// running requests' decode tokens and chunks of pending prefills into one
// forward, under a per-step token budget. KV is paged; full blocks of every
// prompt are shared through the radix prefix cache; when the pool runs out,
// unreferenced cached blocks are evicted (LRU) and then the newest request is
// preempted and later recomputed from scratch.
//
// Engine is the façade over three stages, split as vLLM v1 (Scheduler.schedule,
// GPUModelRunner.execute_model, Scheduler.update_from_output) and sglang
// (get_next_batch_to_run, run_batch, process_batch_result) split theirs: the
// Scheduler (engine/scheduler.h) plans a step, the ModelRunner
// (engine/model_runner.h) runs it, the OutputProcessor
// (engine/output_processor.h) samples or verifies, emits and finishes. Its
// public types are in engine/request.h and engine/options.h.
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "engine/finish_reason.h"
#include "engine/kv_cache.h"
#include "engine/model_runner.h"
#include "engine/options.h"
#include "engine/output_processor.h"
#include "engine/prefix_cache.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "models/model.h"
#include "spec/drafter.h"

namespace mx {

class Engine {
 public:
  Engine(std::unique_ptr<Model> model, const EngineOptions& opts);
  ~Engine();  // stops the loop, aborting what is left

  // Thread-safe. Validates the request (throws mx::Error: empty prompt, bad
  // sampling params, token ids out of range; ContextTooLong when prompt +
  // max_tokens exceed the model's context or the KV cache) and returns its id;
  // throws QueueFull when max_queue requests are waiting.
  uint64_t submit(GenerationRequest req, TokenCallback cb);
  void cancel(uint64_t id);  // thread-safe; the request ends with FinishReason::Abort

  // Runs steps until every submitted request has finished (tests, CLI).
  void run_until_idle();
  // Or a background thread that runs steps as work arrives.
  void start();
  void stop();

  EngineMetrics metrics() const;
  const ModelConfig& config() const { return model_->config(); }
  Model& model() { return *model_; }

  using QueueFull = mx::QueueFull;
  using ContextTooLong = mx::ContextTooLong;

 private:
  bool step();  // one forward; false when there was nothing to do

  std::unique_ptr<Model> model_;
  EngineOptions opts_;
  std::unique_ptr<KVPool> pool_;
  std::unique_ptr<PrefixCache> cache_;
  std::unique_ptr<Drafter> drafter_;
  // The stages (declared after what they refer to, so they go first).
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<OutputProcessor> outputs_;
  StepPlan plan_;  // reused by every step
  std::thread thread_;
  std::atomic<bool> stop_{false};
};

}  // namespace mx
