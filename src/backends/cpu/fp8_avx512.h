#pragma once
// F8_E4M3 weights to f32 on AVX-512, shared by the f32-activation kernels
// (matmul_avx512.cpp) and the bf16-activation ones (matmul_bf16dot_avx512.cpp);
// include only from files compiled with -mavx512f -mavx512bw -mavx512vl.
//
// E4M3 -> f32 through f16, exactly: sign-extending the byte and shifting it left
// by 7 puts S.EEEE.MMM at f16 bits 15, 13..10, 9..7 (bit 14, a copy of S, is
// cleared), i.e. the e4m3 value times 2^-8, subnormals included; vcvtph2ps widens
// it exactly. The 2^8 is folded into the block scale (s * 256, exact), so the
// weight is fp8 * s rounded once, as dequantize_f32 computes it. 0x7f / 0xff
// become NaN.
#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/avx512_common.h"

namespace mx::matmul_detail::avx512 {

// 16 codes, times s (a block scale from fp8_scale).
MX_INLINE __m512 fp8_cvt16(__m128i b, __m512 s) {
  const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7),
                                     _mm256_set1_epi16(int16_t(0xBFFF)));
  const __mmask16 nan = _mm_cmpeq_epi8_mask(_mm_or_si128(b, _mm_set1_epi8(int8_t(0x80))), _mm_set1_epi8(-1));
  return _mm512_mul_ps(_mm512_mask_mov_ps(_mm512_cvtph_ps(h), nan, _mm512_set1_ps(__builtin_nanf(""))), s);
}

// 32 codes (one vpmovsxbw zmm), times s. NaN codes are found with one compare
// and patched in on a branch that real checkpoints never take.
MX_INLINE void fp8_cvt32(__m256i b, __m512 s, __m512& lo, __m512& hi) {
  const __m512i h = _mm512_and_si512(_mm512_slli_epi16(_mm512_cvtepi8_epi16(b), 7),
                                     _mm512_set1_epi16(int16_t(0xBFFF)));
  lo = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), s);
  hi = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), s);
  const __mmask32 nan = _mm256_cmpeq_epi8_mask(_mm256_or_si256(b, _mm256_set1_epi8(int8_t(0x80))),
                                               _mm256_set1_epi8(-1));
  if (__builtin_expect(nan != 0, 0)) {
    const __m512 q = _mm512_set1_ps(__builtin_nanf(""));
    lo = _mm512_mask_mov_ps(lo, __mmask16(nan), q);
    hi = _mm512_mask_mov_ps(hi, __mmask16(nan >> 16), q);
  }
}

// The block scale of (row, column block kb) times 2^8 (see above); scales null
// means scale 1. DeepSeek's layout: f32 [ceil(out/128), scale_cols].
MX_INLINE __m512 fp8_scale(const void* scales, int64_t scale_cols, int64_t row, int64_t kb) {
  const float* s = static_cast<const float*>(scales);
  return _mm512_set1_ps((s ? s[(row >> 7) * scale_cols + kb] : 1.0f) * 256.0f);
}

}  // namespace mx::matmul_detail::avx512
