// BF16 weights times bf16 activations on AVX512-BF16 (vdpbf16ps): 32 multiply-adds
// per instruction, weights fed straight from memory with no widening. The
// accumulation scheme and why it keeps batch invariance: matmul_impl.h ("BF16
// weights with bf16 activations"). Intel SDM, VDPBF16PS / VCVTNE2PS2BF16.
//
// Why: the f32-activation kernels widen each weight (vpmovzxwd + vpslld) before an
// FMA of 16 lanes, two extra uops per 16 weights on the ports the FMAs use; here a
// 64-byte load feeds one instruction of 32 products, so prefill does twice the
// multiply-adds per instruction and decode keeps fewer uops in flight per line.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/avx512_common.h"
#include "backends/cpu/matmul_impl.h"

namespace mx::matmul_detail {
namespace {

using avx512::store_hsums;

constexpr int K = 32;  // bf16 elements per vdpbf16ps

// One token row to bf16, round to nearest even (vcvtne2ps2bf16), zero-padded to stride.
void round_row(const float* x, int64_t in, int64_t stride, uint16_t* dst) {
  int64_t i = 0;
  for (; i + K <= in; i += K) {
    const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(dst + i, __m512i(b));
  }
  if (i < in) {
    const int64_t n = in - i;
    const __mmask16 lo = __mmask16(n >= 16 ? 0xFFFF : (1u << n) - 1);
    const __mmask16 hi = __mmask16(n <= 16 ? 0 : (1u << (n - 16)) - 1);
    const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, x + i + 16), _mm512_maskz_loadu_ps(lo, x + i));
    _mm512_storeu_si512(dst + i, __m512i(b));  // lanes past `in` are +0
    i += K;
  }
  if (i < stride) std::memset(dst + i, 0, size_t(stride - i) * 2);
}

MX_INLINE __m512bh load_bh(const uint16_t* p) { return __m512bh(_mm512_loadu_si512(p)); }

// y[t0 .. t0+TT, r0 .. r0+R). PF: software prefetch a.prefetch bytes ahead on each
// row, one 64-byte line per chunk (the GEMV tiles; as stream_tile in matmul_avx512.cpp).
template <int TT, int R, bool PF>
void dot_tile(const Args& a, int64_t t0, int64_t r0) {
  const int64_t in = a.in, xs = a.xb_stride;
  const uint16_t* w = static_cast<const uint16_t*>(a.w) + r0 * in;
  const uint16_t* x = a.xb + t0 * xs;
  const int64_t ahead = PF ? a.prefetch / 2 : 0;
  __m512 acc[TT][R];
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[t][r] = _mm512_setzero_ps();
  auto chunk = [&](int64_t i, auto load_w) __attribute__((always_inline)) {
    __m512bh wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = load_w(w + r * in + i);
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t) {
      const __m512bh xv = load_bh(x + t * xs + i);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[t][r] = _mm512_dpbf16_ps(acc[t][r], wv[r], xv);
    }
  };
  int64_t i = 0;
  for (; i + K <= in; i += K) {
    if (PF && ahead > 0) {
      // Near the end of the rows, the start of the next tile's rows instead.
      const uint16_t* pf = w + i + ahead + (i + ahead < in ? 0 : (R - 1) * in);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(pf + r * in), _MM_HINT_T0);
    }
    chunk(i, [](const uint16_t* p) __attribute__((always_inline)) { return load_bh(p); });
  }
  if (i < in) {
    const __mmask32 m = __mmask32((uint64_t(1) << (in - i)) - 1);
    chunk(i, [m](const uint16_t* p) __attribute__((always_inline)) {
      return __m512bh(_mm512_maskz_loadu_epi16(m, p));
    });
  }
  store_hsums(a.y + t0 * a.out + r0, a.out, acc);
}

struct Tiles {
  template <int TT, int R>
  static void tile(const Args& a, int64_t t0, int64_t r0) {
    dot_tile<TT, R, false>(a, t0, r0);
  }
};

// The shapes of the f32-activation BF16 kernels (so tuned entries keep naming a
// variant): GEMV 8 / 4 rows with 2- and 4-token tiles; GEMM 4 x 6 and 8 x 3
// (TT x R accumulators + R weight vectors + 1 activation vector <= 32 zmm).
constexpr Gemv kGemv[] = {
    {8, dot_tile<1, 8, true>, dot_tile<2, 8, true>, in_subtiles<dot_tile<4, 4, true>, 4, 8>},
    {4, dot_tile<1, 4, true>, dot_tile<2, 4, true>, dot_tile<4, 4, true>}};
constexpr Gemm kGemm[] = {gemm_of<Tiles, 4, 6>(), gemm_of<Tiles, 8, 3>()};

}  // namespace

DtypeKernels avx512_bf16dot_kernels() {
  DtypeKernels k{nullptr, kGemv, kGemm};
  k.bf16_act = round_row;
  return k;
}

}  // namespace mx::matmul_detail
