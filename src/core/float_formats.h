#pragma once
// Float storage formats written once for the host and the GPU kernels (plain
// arithmetic, nothing a device cannot call), so a value stored by one backend
// reads back bit for bit the same on another: bf16 (round to nearest even,
// NaN kept quiet) and OCP FP8 E4M3 "fn" (round to nearest even, saturating at
// +-448, no infinities, S.1111.111 is NaN; OCP 8-bit floating point spec 1.0).
#include <cmath>
#include <cstdint>
#include <cstring>

#if !defined(MX_HD)
#if defined(__CUDACC__) || defined(__HIPCC__)
#define MX_HD __host__ __device__
#else
#define MX_HD
#endif
#endif

namespace mx {

MX_HD inline uint32_t f32_bits(float f) {
#if defined(__HIP_DEVICE_COMPILE__)
  return __builtin_bit_cast(uint32_t, f);
#elif defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
#endif
}
MX_HD inline float bits_f32(uint32_t u) {
#if defined(__HIP_DEVICE_COMPILE__)
  return __builtin_bit_cast(float, u);
#elif defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, 4);
  return f;
#endif
}

MX_HD inline uint16_t to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}
MX_HD inline float from_bf16(uint16_t h) { return bits_f32(uint32_t(h) << 16); }

MX_HD inline uint8_t to_e4m3(float f) {
  if (f != f) return 0x7f;
  const uint8_t sign = (f32_bits(f) >> 24) & 0x80;
  const float a = fabsf(f);
  if (a >= 448.0f) return sign | 0x7e;
  if (a < 0.015625f) return sign | uint8_t(int(rintf(a * 512.0f)));  // subnormals: multiples of 2^-9
  // Normal (2^-6 <= a < 448): the f32 mantissa rounded to 3 bits, to nearest even, on
  // the bits (a carry steps the exponent, as it should); the f32 exponent 127 + e
  // becomes 7 + e. a < 448 rounds to 448 (0x7e) at most. (Was frexpf and rintf: two
  // libm calls per value, a third of `mxserve quantize --format fp8`.)
  const uint32_t u = f32_bits(a);
  return sign | uint8_t(((u + 0x7ffffu + ((u >> 20) & 1u)) >> 20) - (120u << 3));
}
MX_HD inline float from_e4m3(uint8_t b) {
  const uint32_t e = (b >> 3) & 15, m = b & 7;
  float v;
  if (e == 15 && m == 7) v = bits_f32(0x7fc00000u);
  else if (e == 0) v = ldexpf(float(m), -9);
  else v = ldexpf(float(8 + m), int(e) - 10);
  return (b & 0x80) ? -v : v;
}

}  // namespace mx
