#pragma once
// Helpers shared by the CPU kernel tests: the ISAs this machine runs (each is
// tested, not only the dispatcher's pick) and Gaussian test data.
#include <random>
#include <vector>

#include "core/cpu_features.h"

namespace mxtest {

// Scalar, then AVX2 and AVX-512 where this CPU has them (mx::isa_supported, the
// kernels' own test; MXSERVE_ISA does not narrow it).
inline std::vector<mx::Isa> cpu_isas() {
  std::vector<mx::Isa> v;
  for (mx::Isa isa : {mx::Isa::Scalar, mx::Isa::Avx2, mx::Isa::Avx512})
    if (mx::isa_supported(isa)) v.push_back(isa);
  return v;
}

// n samples of N(0, sd^2).
inline std::vector<float> randn(size_t n, std::mt19937& rng, float sd = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

}  // namespace mxtest
