#pragma once
// silu_mul (activation.h) written once over a SIMD traits class S (simd_avx2.h,
// simd_avx512.h); include only from a file compiled for S's ISA. The last n % V
// elements go through the same vector code in a zero-padded copy, so every
// element takes the same operations wherever it sits.
#include <algorithm>
#include <cstdint>

namespace mx::activation_detail {

template <class S>
struct Silu {
  using F = typename S::F;
  static F apply(F g, F u) {
    const F e = S::exp(S::sub(S::zero(), g));
    return S::mul(S::div(g, S::add(S::set1(1.0f), e)), u);
  }
  static void silu_mul(float* y, const float* g, const float* u, int64_t n) {
    constexpr int V = S::V;
    int64_t i = 0;
    for (; i + V <= n; i += V) S::store(y + i, apply(S::load(g + i), S::load(u + i)));
    if (i < n) {
      alignas(64) float gb[V] = {}, ub[V] = {}, yb[V];
      std::copy(g + i, g + n, gb);
      std::copy(u + i, u + n, ub);
      S::store(yb, apply(S::load(gb), S::load(ub)));
      std::copy(yb, yb + (n - i), y + i);
    }
  }
};

}  // namespace mx::activation_detail
