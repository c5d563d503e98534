#pragma once
// llama2.c checkpoints (Karpathy's run.c "legacy" version-0 layout): a 7 x int32
// header followed by float32 arrays. Imported as an HF-named Llama checkpoint so
// the same model code runs it.
#include <string>

#include "formats/model_config.h"
#include "formats/tensor_store.h"

namespace mx {

struct ImportedModel {
  ModelConfig config;
  TensorStore tensors;
};

// True when the file starts like a llama2.c checkpoint (plausible header and an
// exact size match), so callers can tell it apart from other formats.
bool looks_like_llama2c(const std::string& path);

ImportedModel import_llama2c(const std::string& path);

// The vocabulary size its header states (a negative one means an untied classifier).
int llama2c_vocab_size(const std::string& path);

}  // namespace mx
