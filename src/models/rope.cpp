#include "models/rope.h"

#include <cmath>

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

void Rope::rotate(float* x, int n_heads, int stride, int pos, int rotary_dim, bool interleaved,
                  float mscale, const float* inv_freq) {
  const int half = rotary_dim / 2;
  // Angles in double: positions reach 1e5+ and float angle products lose digits.
  float cs[512], sn[512];
  for (int i = 0; i < half; ++i) {
    double a = double(pos) * double(inv_freq[i]);
    cs[i] = float(std::cos(a)) * mscale;
    sn[i] = float(std::sin(a)) * mscale;
  }
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + size_t(h) * stride;
    for (int i = 0; i < half; ++i) {
      float* p0 = interleaved ? v + 2 * i : v + i;
      float* p1 = interleaved ? v + 2 * i + 1 : v + i + half;
      const float a = *p0, b = *p1;
      *p0 = a * cs[i] - b * sn[i];
      *p1 = b * cs[i] + a * sn[i];
    }
  }
}

}  // namespace mx
