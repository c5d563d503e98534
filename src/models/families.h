#pragma once
// One builder per architecture family; each binds the checkpoint's tensors by
// their real names and stacks the shared blocks (models/decoder.h).
#include <memory>

#include "formats/tensor_store.h"
#include "models/model.h"

namespace mx {

using Store = std::shared_ptr<TensorStore>;
std::unique_ptr<Model> build_llama(const ModelConfig& c, Store s, const LoadOptions& o);      // llama.cpp
std::unique_ptr<Model> build_glm4_moe(const ModelConfig& c, Store s, const LoadOptions& o);   // glm4_moe.cpp
std::unique_ptr<Model> build_deepseek_v3(const ModelConfig& c, Store s, const LoadOptions& o);  // deepseek_v3.cpp
std::unique_ptr<Model> build_qwen3_moe(const ModelConfig& c, Store s, const LoadOptions& o);  // qwen3_moe.cpp

}  // namespace mx
