#include "models/rope.h"

#include "core/error.h"

namespace mx {

Rope::Rope(const ModelConfig& c, int head_dim, int rotary_dim, RopeStyle style)
    : rotary_dim_(rotary_dim),
      style_(style),
      mscale_(rope_attention_factor(c)),
      inv_freq_(rope_inv_freq(c, rotary_dim)) {
  MX_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= head_dim && rotary_dim <= 1024,
           "rotary dim {} must be even, positive and at most head_dim {} (and 1024)", rotary_dim,
           head_dim);
}

}  // namespace mx
