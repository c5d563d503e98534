#pragma once
// Row orders for llama.cpp's Q/K permutation. HF's llama rotates halves
// (rotate_half: pairs (j, j + d/2) of each head); llama.cpp's llama arch rotates
// adjacent pairs (2j, 2j + 1), so convert_hf_to_gguf.py LlamaModel.permute
// reorders each head's rows: GGUF row (h, j, s) = HF row (h, s, j) for
// j < d/2, s in {0, 1}. src(r) says which input row output row r comes from.
#include <cstdint>

namespace mx {

struct RowOrder {
  enum Kind { Identity, ToGguf, FromGguf };
  Kind kind = Identity;
  int64_t head_dim = 0;

  static RowOrder identity(int64_t) { return {}; }
  // Whether a tensor of this shape is one llama.cpp permutes: a weight [rows, cols], or a bias
  // [rows] (rows of one value), whose rows are `heads` heads of an even size (the orders below
  // divide by it).
  template <class Shape>
  static bool llama_permutable(const Shape& shape, int64_t heads) {
    return (shape.size() == 1 || shape.size() == 2) && heads > 0 && shape[0] > 0 && shape[0] % heads == 0 &&
           (shape[0] / heads) % 2 == 0;
  }
  static RowOrder llama_permute(int64_t rows, int64_t heads) { return {ToGguf, rows / heads}; }
  static RowOrder llama_unpermute(int64_t rows, int64_t heads) { return {FromGguf, rows / heads}; }

  int64_t src(int64_t r) const {
    if (kind == Identity) return r;
    const int64_t h = r / head_dim, i = r % head_dim, half = head_dim / 2;
    if (kind == ToGguf) return h * head_dim + (i % 2) * half + i / 2;  // GGUF row r <- HF row
    return h * head_dim + 2 * (i % half) + i / half;                  // HF row r <- GGUF row
  }
};

}  // namespace mx
