#pragma once
// Random weights of --load-format dummy (models/dummy_weights.h), drawn by the
// same counter-based generator on every backend, so one seed gives one model
// wherever it is made.
#include <cstdint>

#include "core/dtype.h"
#include "core/float_formats.h"
#include "backends/sample_impl.h"  // uniform01

namespace mx {

// Element i of a dummy tensor drawn with `seed`, stored as `code`
// (kFillF32, kFillBF16, kFillE4M3, kFillByte): a uniform value in [lo, hi), or for
// bytes a uniform integer in [lo, hi]. Written into dst at index `at` (i itself
// when the whole tensor is made; a slice of it, Backend::fill_uniform_block,
// writes element i of the tensor at its own index in the slice).
enum : int { kFillF32 = 0, kFillBF16 = 1, kFillE4M3 = 2, kFillByte = 3 };
MX_HD inline void fill_one(void* dst, int code, uint64_t at, uint64_t i, float lo, float hi, uint64_t seed) {
  const float u = uniform01(seed, 0x64756d6d79ull, i);  // "dummy"
  if (code == kFillByte) {
    const int a = int(lo), n = int(hi) - a + 1;
    int v = a + int(u * float(n));
    if (v > int(hi)) v = int(hi);
    static_cast<uint8_t*>(dst)[at] = uint8_t(v);
    return;
  }
  const float x = lo + (hi - lo) * u;
  if (code == kFillF32) static_cast<float*>(dst)[at] = x;
  else if (code == kFillBF16) static_cast<uint16_t*>(dst)[at] = to_bf16(x);
  else static_cast<uint8_t*>(dst)[at] = to_e4m3(x);
}

// Element index (in the whole tensor) of entry e of a rows x cols block whose
// row r starts at element first + r * stride (Backend::fill_uniform_block).
MX_HD inline uint64_t fill_source_index(uint64_t e, uint64_t cols, uint64_t stride, uint64_t first) {
  return first + (e / cols) * stride + e % cols;
}

// The fill code of a dtype, -1 for one fill_uniform does not make.
inline int fill_code(DType t) {
  switch (t) {
    case DType::F32: return kFillF32;
    case DType::BF16: return kFillBF16;
    case DType::F8_E4M3: return kFillE4M3;
    case DType::U8: return kFillByte;
    default: return -1;
  }
}

}  // namespace mx
