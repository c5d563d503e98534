#pragma once
// GGUF <-> our checkpoints (docs/gguf.md). Reading maps llama.cpp's metadata
// ({arch}.block_count, .embedding_length, .expert_count, ...) onto a ModelConfig
// (through the same config.json parser, so the same validation applies) and its
// tensor names (token_embd, blk.N.attn_q, ffn_gate_exps, ...) onto the HF names
// our weight binder expects, undoing llama.cpp's conversions exactly: Q/K row
// permutation for llama (interleaved RoPE), experts stacked into 3-D tensors,
// block_mxfp4 nibble order. Writing does the reverse for `mxserve convert`.
#include <memory>
#include <string>

#include "io/model_config.h"
#include "io/tensor_store.h"

namespace mx {

class Tokenizer;

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

enum class GgufOutType { F32, F16, BF16, MXFP4 };
GgufOutType gguf_out_type(const std::string& name);  // "f32" | "f16" | "bf16" | "mxfp4"

struct ConvertReport {
  int tensors = 0;       // GGUF tensors written
  int mxfp4 = 0;         // of which MXFP4
  size_t bytes = 0;      // data bytes
};

// Writes an HF checkpoint (config + tensors, possibly already MXFP4-quantized)
// as GGUF for llama.cpp. The tokenizer written: `spm`, a SentencePiece-style
// one (e.g. llama2.c's tok512.bin, for a model that has no tokenizer.json), as
// tokenizer.ggml.model "llama" with its pieces, scores and token types; else
// hf_dir's tokenizer.json (byte-level BPE), when present.
// F32/F16/BF16: every float tensor of rank >= 2 in that type, 1-D tensors F32
// (as llama.cpp's convert_hf_to_gguf.py). MXFP4: the Linear layers that
// `mxserve quantize --format mxfp4` would quantize, bit-identically; other
// tensors keep their source float type. Already-quantized MXFP4 layers stay MXFP4.
ConvertReport write_gguf_checkpoint(const ModelConfig& c, const TensorStore& tensors, const std::string& hf_dir,
                                    const std::string& out, GgufOutType type, const Tokenizer* spm = nullptr);

}  // namespace mx
