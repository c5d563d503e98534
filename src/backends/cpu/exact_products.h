#pragma once
// A scope in which the CPU computes exact f32 products: BF16 and FP8 weights
// multiply the f32 activations (matmul.h, matmul_bf16_activations) and attention
// multiplies in f32 (attention.h, attention_products follows the same switch),
// as MXSERVE_BF16_ACTIVATIONS=0 makes it for a whole process. The product the GPU
// kernels and the float64 references compute; `mxserve eval --exact-reference`
// runs its reference in one. Process-wide: open it only while no forward runs.
#include "backends/cpu/matmul.h"

namespace mx {

class ExactCpuProducts {
 public:
  ExactCpuProducts() : prev_(set_matmul_bf16_activations(false)) {}
  ~ExactCpuProducts() { set_matmul_bf16_activations(prev_); }
  ExactCpuProducts(const ExactCpuProducts&) = delete;
  ExactCpuProducts& operator=(const ExactCpuProducts&) = delete;

 private:
  bool prev_;
};

}  // namespace mx
