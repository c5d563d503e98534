#include "engine/model_runner.h"

#include <exception>

namespace mx {

ModelRunner::ModelRunner(Model& model, KVPool& pool, int step_tokens, bool keep_hidden)
    : model_(model), pool_(pool), vocab_(size_t(model.config().vocab_size)) {
  logits_.resize(size_t(step_tokens) * vocab_);
  if (keep_hidden) hidden_.resize(size_t(step_tokens) * model.config().hidden_size);
}

std::optional<std::string> ModelRunner::execute(const StepPlan& plan) {
  try {
    model_.forward(plan.batch, pool_, logits_.data(), hidden_.empty() ? nullptr : hidden_.data());
  } catch (const std::exception& e) {
    return std::string("the forward pass failed: ") + e.what();
  }
  return std::nullopt;
}

}  // namespace mx
