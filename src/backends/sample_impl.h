#pragma once
// Device sampling's random numbers, shared by the CPU and GPU backends so both
// draw the same token from the same logits: a counter-based generator (the
// splitmix64 finaliser over (seed, row, index)), so every vocabulary entry gets
// its own independent uniform without state, in any order or thread layout.
// Gumbel-max: argmax_i(logit_i / T + G_i) with G_i = -log(-log(U_i)) is an exact
// draw from softmax(logits / T).
#include <cmath>
#include <cstdint>

#include "backends/route_impl.h"  // MX_HD

namespace mx {

MX_HD inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// U in (0, 1): 24 random bits, never 0 or 1.
MX_HD inline float uniform01(uint64_t seed, uint64_t row, uint64_t i) {
  const uint64_t h = mix64(seed ^ mix64(row * 0x9e3779b97f4a7c15ull + mix64(i + 0x632be59bd9b4e019ull)));
  return (float(h >> 40) + 0.5f) * (1.0f / 16777216.0f);
}

MX_HD inline float gumbel_key(float logit, float inv_temperature, uint64_t seed, uint64_t row, uint64_t i) {
  return logit * inv_temperature - logf(-logf(uniform01(seed, row, i)));
}

}  // namespace mx
