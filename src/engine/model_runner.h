#pragma once
// The model runner executes a step the scheduler planned: one Model::forward of
// the plan's batch on the model's backend, into logits (the rows the plan asked
// for) and, when the drafter needs them, every token's last hidden state. It
// is vLLM v1's GPUModelRunner.execute_model and sglang's run_batch without the
// sampling, which the output stage does (engine/output_processor.h), so that
// verification and constraints see the raw rows.
#include <optional>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "models/model.h"

namespace mx {

class ModelRunner {
 public:
  // Buffers for step_tokens rows of logits and, with keep_hidden, of hidden states.
  ModelRunner(Model& model, KVPool& pool, int step_tokens, bool keep_hidden);
  // Runs plan.batch. A forward that throws fails only this step: the message
  // (what failed) comes back and the step's requests end with it; the engine
  // and every other request go on.
  std::optional<std::string> execute(const StepPlan& plan);
  // Row i of the last step's logits, [vocab]; rows are in plan.batch.logit_rows order.
  float* logits(int row) { return logits_.data() + size_t(row) * vocab_; }
  const float* hidden() const { return hidden_.empty() ? nullptr : hidden_.data(); }  // [tokens, hidden_size] or null

 private:
  Model& model_;
  KVPool& pool_;
  size_t vocab_;
  std::vector<float> logits_, hidden_;
};

}  // namespace mx
