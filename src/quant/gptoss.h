#pragma once
// gpt-oss-style MXFP4 expert tensors (docs/architectures.md 5.3; HF
// integrations/mxfp4.py): per MoE layer
//   mlp.experts.gate_up_proj_blocks U8 [E, 2I, H/32, 16], ..._scales U8 [E, 2I, H/32]
//   mlp.experts.down_proj_blocks    U8 [E, H, I/32, 16],  ..._scales U8 [E, H, I/32]
// The bytes of one expert's [rows, K/32, 16] blocks are exactly Quark's packed
// [rows, K/2] rows (element 2j low nibble, 2j+1 high), and its scales exactly
// weight_scale [rows, K/32]; gate_up rows alternate gate and up (row 2k is gate
// row k, row 2k+1 up row k).
#include <cstdint>

#include "core/tensor.h"

namespace mx {

// Expert e of a blocks/scales pair as a zero-copy MXFP4 weight [rows, K].
Tensor gptoss_expert(const Tensor& blocks, const Tensor& scales, int64_t e);

struct GateUp {
  OwnedTensor gate_data, gate_scales, up_data, up_scales;
  Tensor gate, up;  // MXFP4 [I, H] views of the owned buffers
};
// Splits an interleaved gate_up expert weight [2I, H] into gate and up [I, H].
GateUp split_gate_up(const Tensor& gate_up);

}  // namespace mx
