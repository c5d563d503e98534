#pragma once
// GGUF <-> our checkpoints (docs/gguf.md). Reading maps llama.cpp's metadata
// ({arch}.block_count, .embedding_length, .expert_count, ...) onto a ModelConfig
// (through the same config.json parser, so the same validation applies) and its
// tensor names (token_embd, blk.N.attn_q, ffn_gate_exps, ...) onto the HF names
// our weight binder expects, undoing llama.cpp's conversions exactly: Q/K row
// permutation for llama (interleaved RoPE), experts stacked into 3-D tensors,
// block_mxfp4 nibble order. Writing (the reverse, for `mxserve convert`) is
// convert/gguf_export.h.
#include <memory>
#include <string>

#include "formats/model_config.h"
#include "formats/tensor_store.h"

namespace mx {


struct GgufCheckpoint {
  ModelConfig config;
  std::shared_ptr<TensorStore> tensors;  // HF names; keeps the mapping alive
};

// Reads a GGUF model file. F32/BF16 tensors are zero-copy views; F16 becomes
// BF16 when every value converts exactly, else F32; Q8_0, Q4_0, Q5_0, Q4_K and Q6_K
// are dequantized to F32; MXFP4 is repacked into our MXFP4 layout (no
// dequantization) and the config gets the matching quantization_config.
GgufCheckpoint read_gguf_checkpoint(const std::string& path);
bool is_gguf_file(const std::string& path);  // by magic

}  // namespace mx
