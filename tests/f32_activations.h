#pragma once
// A scope in which the CPU computes exact f32 products (backends/cpu/exact_products.h):
// the product the GPU kernels and the float64 references compute.
#include "backends/cpu/exact_products.h"

namespace mxtest {

using F32Activations = mx::ExactCpuProducts;

}  // namespace mxtest
