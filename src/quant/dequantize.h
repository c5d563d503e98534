#pragma once
// Dequantization of a whole weight to f32, for the few places that need plain
// values rather than a kernel (MLA's absorbed kv_b_proj, quality reports).
#include "core/tensor.h"

namespace mx {

// Any 2-D weight (F32, BF16, F16, MXFP4 with scales, F8_E4M3 with or without
// block scales) as an owned F32 tensor of the same logical shape.
OwnedTensor dequantize_f32(const Tensor& w);

}  // namespace mx
