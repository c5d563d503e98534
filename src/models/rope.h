#pragma once
// Rotary position embedding over the first rotary_dim dims of each head (the
// rest pass through: partial rotary, GLM-4.5). Two pairings exist in real
// checkpoints (docs/architectures.md 0.4):
//   RotateHalf  (HF rotate_half, "NeoX"): dim i pairs with i + rotary_dim/2;
//               Llama / Qwen / GLM-4.5 HF weights.
//   Interleaved ("GPT-J"): dim 2i pairs with 2i+1; DeepSeek-V3's rope slice.
// yarn's attention factor scales cos and sin.
#include <vector>

#include "formats/model_config.h"
#include "backends/cpu/ops.h"  // rope_rotate: the math, which the CPU backend runs too

namespace mx {

enum class RopeStyle { RotateHalf, Interleaved };

class Rope {
 public:
  Rope() = default;
  Rope(const ModelConfig& c, int head_dim, int rotary_dim, RopeStyle style);
  int rotary_dim() const { return rotary_dim_; }
  // x: n_heads vectors spaced `stride` floats apart, each rotated on its first
  // rotary_dim dims for position pos.
  void apply(float* x, int n_heads, int stride, int pos) const {
    rope_rotate(x, n_heads, stride, pos, rotary_dim_, style_ == RopeStyle::Interleaved, mscale_, inv_freq_.data());
  }
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  float mscale() const { return mscale_; }
  RopeStyle style() const { return style_; }

 private:
  int rotary_dim_ = 0;
  RopeStyle style_ = RopeStyle::RotateHalf;
  float mscale_ = 1.0f;
  std::vector<float> inv_freq_;
};

}  // namespace mx
