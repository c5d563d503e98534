#pragma once
// A scope in which BF16 weights multiply the f32 activations on the CPU, as
// MXSERVE_BF16_ACTIVATIONS=0 makes it for a process: the product the GPU kernels
// and the float64 references compute (backends/cpu/matmul.h, Bf16Act).
#include "backends/cpu/matmul.h"

namespace mxtest {

class F32Activations {
 public:
  F32Activations() : prev_(mx::set_matmul_bf16_activations(false)) {}
  ~F32Activations() { mx::set_matmul_bf16_activations(prev_); }
  F32Activations(const F32Activations&) = delete;
  F32Activations& operator=(const F32Activations&) = delete;

 private:
  bool prev_;
};

}  // namespace mxtest
