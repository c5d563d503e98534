#pragma once
// Measured quantization loss: run a reference and a quantized model over the
// same token sequences (teacher forcing) and compare next-token distributions
// at every position: KL(ref || quant), top-1 agreement, and each model's
// perplexity on the sequences. No claim without this measurement.
#include <cstdint>
#include <string>
#include <vector>

#include "models/model.h"

namespace mx {

// Relative RMS error of one quantized Linear against the reference weight.
struct LayerError {
  std::string layer;
  double rel_rmse = 0;
};

struct QualityReport {
  std::vector<LayerError> layers;  // per-layer weight error (where the two differ)
  int sequences = 0;
  int64_t positions = 0;
  double kl_mean = 0, kl_p99 = 0, kl_max = 0;  // nats
  double top1_agreement = 0;                   // fraction of positions with equal argmax
  double ppl_ref = 0, ppl_quant = 0;           // on the sequences' own next tokens
  std::string to_json() const;
  std::string to_text() const;
};

// Per-Linear weight error: ||dequant(W_q) - W_ref|| / ||W_ref|| for every Linear
// whose storage differs between the two models.
std::vector<LayerError> weight_errors(const Model& ref, const Model& quant);

// exact_reference: the reference runs with exact f32 products on the CPU
// (backends/cpu/exact_products.h), and so over an f32 KV cache (--kv-dtype auto),
// so the KL also counts what the bf16 matmul and attention products and the bf16
// cache cost the model under test.
QualityReport measure_quality(Model& ref, Model& quant, const std::vector<std::vector<int32_t>>& seqs,
                              bool exact_reference = false);

// Sequences to measure on when no calibration file is given: the reference
// model's own samples (temperature 1, fixed seeds) from BOS, so perplexity is
// measured on text the reference finds plausible rather than on noise.
std::vector<std::vector<int32_t>> self_generated_sequences(Model& ref, int count, int length, uint64_t seed);

// A calibration file: one sequence of token ids per line (spaces or commas).
std::vector<std::vector<int32_t>> read_token_file(const std::string& path);

}  // namespace mx
