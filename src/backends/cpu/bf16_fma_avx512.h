#pragma once
// vdpbf16ps's products on f32 FMAs, bit for bit, shared by the GEMM's FMA tiles
// (matmul_bf16dot_avx512.cpp) and the bf16 attention's FMA tiles
// (attention_bf16_avx512.cpp); include only from files compiled with
// -mavx512f -mavx512bw -mavx512bf16.
//
// vdpbf16ps adds to lane l a[2l+1] * b[2l+1], then a[2l] * b[2l], each rounded to
// nearest even, with DAZ and FTZ (Intel SDM, VDPBF16PS). The product of two bf16
// is exact in f32, so two vfmadd231ps on the pairs' halves widened to f32 (the
// high bf16 of a dword: AND 0xFFFF0000; the low: << 16), odd half first, under
// MXCSR DAZ | FTZ and round to nearest, are the same IEEE operations. Where
// vdpbf16ps issues at a quarter of vfmadd231ps's rate (Intel Xeon, Emerald Rapids:
// 0.74 against 0.18 ns per zmm instruction, BENCHMARKS.md) two FMAs are the faster
// way to the same bits. Whether this CPU's vdpbf16ps is exactly these operations
// is checked once (fma_exact); callers offer the FMA path only where it is.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/cpu/avx512_common.h"

namespace mx::bf16fma {


// MXCSR for the scope as vdpbf16ps applies it to itself: DAZ, FTZ, round to nearest
// even. Only around the products: what vdpbf16ps's callers compute on the sums runs
// under the caller's MXCSR.
struct DazFtz {
  unsigned saved = _mm_getcsr();
  DazFtz() { _mm_setcsr((saved & ~0x6000u) | 0x8040); }
  ~DazFtz() { _mm_setcsr(saved); }
  DazFtz(const DazFtz&) = delete;
  DazFtz& operator=(const DazFtz&) = delete;
};

// The odd (high) and even (low) bf16 of each dword, as f32.
MX_INLINE __m512 odd_half(__m512i v) {
  return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int(0xFFFF0000))));
}
MX_INLINE __m512 even_half(__m512i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }

// True if vdpbf16ps on this CPU gives the bits of the two FMAs above on pairs that
// exercise rounding, cancellation, denormal inputs and results, inf and NaN (a NaN
// matches any NaN: which NaN comes out is not part of the contract, matmul_impl.h).
// Computed once per process (4000 vectors, about a millisecond).
inline bool fma_exact() {
  static const bool exact = [] {
    uint32_t s = 12345;
    auto next = [&s] { return s = s * 1664525u + 1013904223u; };
    auto bf16 = [&](int e_lo, int e_span) {
      const uint32_t r = next();
      uint32_t e = uint32_t(e_lo) + (r >> 8) % uint32_t(e_span);
      if ((r & 31) == 0) e = 0;           // denormal or zero
      if ((r >> 20 & 255) == 0) e = 255;  // inf or NaN
      return uint16_t((r >> 31) << 15 | (e & 255) << 7 | (r >> 12 & 127));
    };
    alignas(64) uint16_t w[32], x[32];
    alignas(64) uint32_t c[16];
    alignas(64) float hw[16], em[16];
    for (int it = 0; it < 4000; ++it) {
      // bf16 exponents from e_lo: products far below 2^-126, around 2^-126 (denormal
      // products and sums), around 1, and up to past 2^127 (rounding to inf)
      const int e_lo = it % 4 == 0 ? 1 : it % 4 == 1 ? 50 : it % 4 == 2 ? 100 : 180;
      for (int i = 0; i < 32; ++i) w[i] = bf16(e_lo, 30), x[i] = bf16(e_lo, 30);
      for (int l = 0; l < 16; ++l) {
        const uint32_t r = next();
        c[l] = (r & 3) == 0 ? r & 0x807FFFFF : uint32_t(bf16(std::clamp(2 * e_lo - 127, 1, 194), 60)) << 16 | (r >> 16);
      }
      const __m512i wv = _mm512_load_si512(w), xv = _mm512_load_si512(x);
      const __m512 cv = _mm512_load_ps(reinterpret_cast<const float*>(c));
      _mm512_store_ps(hw, _mm512_dpbf16_ps(cv, __m512bh(wv), __m512bh(xv)));
      {
        DazFtz g;
        _mm512_store_ps(em, _mm512_fmadd_ps(even_half(wv), even_half(xv),
                                            _mm512_fmadd_ps(odd_half(wv), odd_half(xv), cv)));
      }
      for (int l = 0; l < 16; ++l)
        if (std::memcmp(&hw[l], &em[l], 4) != 0 && !(hw[l] != hw[l] && em[l] != em[l])) return false;
    }
    return true;
  }();
  return exact;
}

}  // namespace mx::bf16fma
