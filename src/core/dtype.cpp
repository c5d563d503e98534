#include "core/dtype.h"

#include <cmath>

#include "core/error.h"

namespace mx {

namespace {
struct DTypeInfo {
  DType t;
  const char* name;
  int bits;
};
constexpr DTypeInfo kInfo[] = {
    {DType::F32, "F32", 32},    {DType::F16, "F16", 16}, {DType::BF16, "BF16", 16},
    {DType::F8_E4M3, "F8_E4M3", 8}, {DType::U8, "U8", 8},  {DType::I8, "I8", 8},
    {DType::I16, "I16", 16},    {DType::I32, "I32", 32}, {DType::I64, "I64", 64},
    {DType::BOOL, "BOOL", 8},   {DType::MXFP4, "MXFP4", 4},
};
}  // namespace

int dtype_bits(DType t) { return kInfo[int(t)].bits; }
const char* dtype_name(DType t) { return kInfo[int(t)].name; }

std::optional<DType> dtype_from_name(std::string_view s) {
  for (const auto& i : kInfo)
    if (s == i.name && i.t != DType::MXFP4) return i.t;  // MXFP4 is stored as U8 + scales on disk
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        man <<= 1;
        ++e;
      } while (!(man & 0x400));
      u = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | man << 13;
  } else {
    u = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = uint16_t((u >> 16) & 0x8000);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00;          // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00;         // overflow -> inf (RNE boundary 65520)
  if (a < 0x38800000u) {  // below 2^-14: f16 subnormal (or zero), multiples of 2^-24
    float af;
    std::memcpy(&af, &a, 4);
    // Scaling by 2^24 is exact; nearbyint rounds half to even. 1024 is the
    // smallest normal (0x0400), which the bit pattern gives naturally.
    return sign | uint16_t(std::nearbyint(af * 16777216.0f));
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);         // RNE on the 13 dropped bits
  return sign | uint16_t((r - (112u << 23)) >> 13);
}

float fp8e4m3_to_f32(uint8_t v) { return from_e4m3(v); }

uint8_t f32_to_fp8e4m3(float f) { return to_e4m3(f); }

float load_as_f32(const void* data, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(data)[i];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::F8_E4M3: return fp8e4m3_to_f32(static_cast<const uint8_t*>(data)[i]);
    default: fail("load_as_f32: dtype {} is not a float type", dtype_name(t));
  }
}

}  // namespace mx
