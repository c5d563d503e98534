#pragma once
// ggml block formats converted to and from ours (docs/gguf.md):
// - Q8_0, Q4_0, Q5_0, Q4_K, Q6_K rows dequantized to f32 (ggml-quants.c semantics);
// - MXFP4: ggml's block_mxfp4 is {u8 e8m0; u8 qs[16]} per 32 values with
//   element j in the low nibble of qs[j] and element j+16 in its high nibble;
//   ours (quant/mxfp4.h) keeps elements 2j / 2j+1 in the low / high nibble of
//   byte j and the scales in a separate array. Same E2M1 codes, same E8M0.
#include <cstdint>

namespace mx::ggml {

// True for the types dequantize_row() handles.
bool can_dequantize(uint32_t ggml_type);
// One row of k elements (k a multiple of the type's block size) to f32.
void dequantize_row(uint32_t ggml_type, const uint8_t* src, int64_t k, float* out);

// A row of k elements in our MXFP4 layout (k/2 packed bytes + k/32 scales)
// to k/32 ggml blocks of 17 bytes, and back.
void mxfp4_row_to_ggml(const uint8_t* packed, const uint8_t* scales, int64_t k, uint8_t* blocks);
void mxfp4_row_from_ggml(const uint8_t* blocks, int64_t k, uint8_t* packed, uint8_t* scales);

}  // namespace mx::ggml
