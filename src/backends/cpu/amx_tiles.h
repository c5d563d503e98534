#pragma once
// The AMX tile operations the BF16 AMX matmul (matmul_bf16_amx.cpp) is written over,
// twice: on the hardware (HwTiles: the tile registers and TDPBF16PS), and in software
// (EmuTiles: the Intel SDM's TDPBF16PS pseudo-code on AVX-512 FMAs), so the one kernel
// runs, and is tested, on CPUs without AMX too. Include only from files compiled with
// -mavx512f -mavx512bf16 -mamx-tile -mamx-bf16 (the _amx.cpp suffix).
//
// Every tile is configured as 16 rows of 64 bytes (palette 1), the largest shape:
// C tiles 0-3 (16 x 16 f32), A tiles 4-5 (16 rows x 16 bf16 pairs), B tiles 6-7
// (16 pair rows x 16 columns).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backends/cpu/avx512_common.h"
#include "backends/cpu/bf16_fma_avx512.h"

namespace mx::matmul_detail::amx {

constexpr int kTileRows = 16, kTileBytes = 64;

// The tile registers themselves. The tile configuration is per thread (it lives in the
// thread's XSAVE state): each kernel call loads it on its thread and releases it.
// The tile instructions name their register in the encoding: each operation takes it
// as a template argument and the if-chains below pick the literal.
struct HwTiles {
  // GCC's ldtilecfg and tileloadd intrinsics tell the compiler they read 8 bytes and no
  // memory at all: the configuration is a constant in memory, and each load is preceded
  // by a compiler barrier, so no store to what a tile loads (the copies and packed
  // activations the kernel writes just before) is sunk past it or dropped. The other
  // way, tilestored's asm clobbers memory, which keeps reads of what it stored after it.
  struct Config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
  };
  static_assert(sizeof(Config) == 64);
  static void configure() {
    alignas(64) static constexpr Config kConfig = {
        1, 0, {}, {kTileBytes, kTileBytes, kTileBytes, kTileBytes, kTileBytes, kTileBytes, kTileBytes, kTileBytes},
        {kTileRows, kTileRows, kTileRows, kTileRows, kTileRows, kTileRows, kTileRows, kTileRows}};
    _tile_loadconfig(&kConfig);
  }
  // Back to the init state: no tile data to save at context switches.
  static void release() { _tile_release(); }
#define MX_TILE_PICK(T, OP) \
  static_assert(T >= 0 && T < 8); \
  if constexpr (T == 0) OP(0); \
  else if constexpr (T == 1) OP(1); \
  else if constexpr (T == 2) OP(2); \
  else if constexpr (T == 3) OP(3); \
  else if constexpr (T == 4) OP(4); \
  else if constexpr (T == 5) OP(5); \
  else if constexpr (T == 6) OP(6); \
  else OP(7)
  template <int T>
  MX_INLINE static void zero() {
#define MX_OP(t) _tile_zero(t)
    MX_TILE_PICK(T, MX_OP);
#undef MX_OP
  }
  template <int T>
  MX_INLINE static void load(const void* p, int64_t stride) {
    __asm__ volatile("" ::: "memory");
#define MX_OP(t) _tile_loadd(t, p, stride)
    MX_TILE_PICK(T, MX_OP);
#undef MX_OP
  }
  template <int T>
  MX_INLINE static void store(void* p, int64_t stride) {
#define MX_OP(t) _tile_stored(t, p, stride)
    MX_TILE_PICK(T, MX_OP);
#undef MX_OP
  }
  // C += A B (TDPBF16PS): C among tiles 0-3, A among 4-5, B among 6-7. (Spelled out:
  // clang checks the literal tile numbers of every branch, taken or not.)
  template <int C, int A, int B>
  MX_INLINE static void dp() {
    static_assert(C >= 0 && C < 4 && (A == 4 || A == 5) && (B == 6 || B == 7));
#define MX_DP(c)                                                \
  if constexpr (A == 4 && B == 6) _tile_dpbf16ps(c, 4, 6);      \
  else if constexpr (A == 4 && B == 7) _tile_dpbf16ps(c, 4, 7); \
  else if constexpr (A == 5 && B == 6) _tile_dpbf16ps(c, 5, 6); \
  else _tile_dpbf16ps(c, 5, 7)
    if constexpr (C == 0) { MX_DP(0); }
    else if constexpr (C == 1) { MX_DP(1); }
    else if constexpr (C == 2) { MX_DP(2); }
    else { MX_DP(3); }
#undef MX_DP
  }
#undef MX_TILE_PICK
};

// The same operations in software, per thread. dp follows the Intel SDM's TDPBF16PS
// (Vol. 2, "TDPBF16PS"): for each output (row m, column n), two f32 partial sums start
// at +0; for k = 0..15 in order, the even one takes an FMA of the even bf16 of A[m][k]
// and of B[k][n], the odd one of the odd bf16s; then C[m][n] += (even + odd). Every
// operation with DAZ, FTZ and round to nearest even, MXCSR not consulted: here MXCSR
// is set to exactly that around them. The products of two bf16 are exact in f32, so
// each FMA rounds once, as the SDM's FP32 FMA does. (The Intrinsics Guide's shorter
// pseudo-code adds each product to C directly; the SDM's is the one followed here, and
// matmul_bf16_amx.cpp offers the hardware only where it gives these bits.)
struct EmuTiles {
  struct alignas(64) State {
    uint32_t t[8][kTileRows][16];
  };
  static State& s() {
    thread_local State st;
    return st;
  }
  static void configure() {}
  static void release() {}
  template <int T>
  static void zero() {
    std::memset(s().t[T], 0, sizeof(s().t[T]));
  }
  template <int T>
  static void load(const void* p, int64_t stride) {
    for (int r = 0; r < kTileRows; ++r) std::memcpy(s().t[T][r], static_cast<const char*>(p) + r * stride, kTileBytes);
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    for (int r = 0; r < kTileRows; ++r) std::memcpy(static_cast<char*>(p) + r * stride, s().t[T][r], kTileBytes);
  }
  template <int C, int A, int B>
  static void dp() {
    State& st = s();
    bf16fma::DazFtz mode;
    for (int m = 0; m < kTileRows; ++m) {
      __m512 even = _mm512_setzero_ps(), odd = _mm512_setzero_ps();  // lane n: column n
      for (int k = 0; k < 16; ++k) {
        const uint32_t pair = st.t[A][m][k];
        const __m512i b = _mm512_loadu_si512(st.t[B][k]);
        even = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_set1_epi32(int(pair << 16))), bf16fma::even_half(b), even);
        odd = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_set1_epi32(int(pair & 0xFFFF0000u))), bf16fma::odd_half(b), odd);
      }
      float* c = reinterpret_cast<float*>(st.t[C][m]);
      _mm512_storeu_ps(c, _mm512_add_ps(_mm512_loadu_ps(c), _mm512_add_ps(even, odd)));
    }
  }
};

}  // namespace mx::matmul_detail::amx
