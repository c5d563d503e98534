#pragma once
// Export of our checkpoints as GGUF for llama.cpp (`mxserve convert`,
// docs/gguf.md): the reverse of formats/gguf_model.h's reading. It sits above
// the tokenizer layer because it writes the model's vocabulary too.
#include <string>

#include "models/model.h"

namespace mx {

class Tokenizer;

enum class GgufOutType { F32, F16, BF16, MXFP4 };
GgufOutType gguf_out_type(const std::string& name);  // "f32" | "f16" | "bf16" | "mxfp4"

struct ConvertReport {
  int tensors = 0;       // GGUF tensors written
  int mxfp4 = 0;         // of which MXFP4
  size_t bytes = 0;      // data bytes
};

// Writes an HF checkpoint (config + tensors, possibly already MXFP4-quantized)
// as GGUF for llama.cpp. The checkpoint is bound to its model first, as quantize
// does: the loader proves every tensor consumed or explicitly ignored and every
// parameter there with the shape and dtype it needs, which the export then relies
// on (a Q row count, an expert index, an MXFP4 scale's shape); anything else is
// the loader's error, listing the names. The tokenizer written: `spm`, a SentencePiece-style
// one (e.g. llama2.c's tok512.bin, for a model that has no tokenizer.json), as
// tokenizer.ggml.model "llama" with its pieces, scores and token types; else
// the checkpoint directory's tokenizer.json (byte-level BPE), when present.
// F32/F16/BF16: every float tensor of rank >= 2 in that type, 1-D tensors F32
// (as llama.cpp's convert_hf_to_gguf.py). MXFP4: the Linear layers that
// `mxserve quantize --format mxfp4` would quantize, bit-identically; other
// tensors keep their source float type. Already-quantized MXFP4 layers stay MXFP4.
ConvertReport write_gguf_checkpoint(const Checkpoint& ck, const std::string& out, GgufOutType type,
                                    const Tokenizer* spm = nullptr);

}  // namespace mx
