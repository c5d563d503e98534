#pragma once
// llama.cpp's GGUF architecture and tensor names and the HF names our models
// bind (docs/gguf.md cites llama.cpp's src/llama-arch.cpp and
// gguf-py/gguf/tensor_mapping.py for each). One table serves both directions.
#include <optional>
#include <string>

#include "formats/model_config.h"

namespace mx::gguf_names {

// general.architecture for an Arch ("llama", "qwen3moe", "glm4moe", ...).
const char* arch_to_gguf(Arch a);
std::optional<Arch> arch_from_gguf(const std::string& s);
std::string supported_archs();  // for error messages

// HF name -> GGUF name for every non-expert tensor (nullopt: not mappable).
std::optional<std::string> to_gguf(const std::string& hf, Arch a);
// GGUF name -> HF name (nullopt: not mappable).
std::optional<std::string> from_gguf(const std::string& gguf, Arch a);

// Heads whose Q/K rows llama.cpp permutes in this tensor (llama arch q/k
// projection weights and biases; formats/gguf_rows.h), 0 for every other tensor.
int64_t llama_permuted_heads(const std::string& hf, const ModelConfig& c);

// Routed experts: model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight in HF,
// stacked into blk.L.ffn_{gate,up,down}_exps.weight [in, out, n_experts] in GGUF.
struct ExpertName {
  int layer = -1, expert = -1;
  std::string proj;  // gate | up | down
};
std::optional<ExpertName> parse_hf_expert(const std::string& hf);
std::optional<ExpertName> parse_gguf_experts(const std::string& gguf);  // expert = -1
std::string hf_expert(int layer, int expert, const std::string& proj);
std::string gguf_experts(int layer, const std::string& proj);

}  // namespace mx::gguf_names
