#include "formats/ggml_dequant.h"

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "formats/gguf.h"

namespace mx::ggml {

namespace {
float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

void q8_0(const uint8_t* x, int64_t nb, float* y) {  // {f16 d; i8 qs[32]}
  for (int64_t i = 0; i < nb; ++i, x += 34) {
    const float d = half(x);
    for (int j = 0; j < 32; ++j) *y++ = int8_t(x[2 + j]) * d;
  }
}

void q4_0(const uint8_t* x, int64_t nb, float* y) {  // {f16 d; u8 qs[16]}
  for (int64_t i = 0; i < nb; ++i, x += 18, y += 32) {
    const float d = half(x);
    for (int j = 0; j < 16; ++j) {
      y[j] = ((x[2 + j] & 0x0F) - 8) * d;
      y[j + 16] = ((x[2 + j] >> 4) - 8) * d;
    }
  }
}

void q5_0(const uint8_t* x, int64_t nb, float* y) {  // {f16 d; u8 qh[4]; u8 qs[16]}
  for (int64_t i = 0; i < nb; ++i, x += 22, y += 32) {
    const float d = half(x);
    uint32_t qh;
    std::memcpy(&qh, x + 2, 4);
    const uint8_t* qs = x + 6;
    for (int j = 0; j < 16; ++j) {
      const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
      y[j] = (((qs[j] & 0x0F) | h0) - 16) * d;
      y[j + 16] = (((qs[j] >> 4) | h1) - 16) * d;
    }
  }
}

void scale_min_k4(int j, const uint8_t* q, uint8_t& d, uint8_t& m) {
  if (j < 4) {
    d = q[j] & 63, m = q[j + 4] & 63;
  } else {
    d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void q4_k(const uint8_t* x, int64_t nb, float* y) {  // {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}
  for (int64_t i = 0; i < nb; ++i, x += 144) {
    const float d = half(x), mn = half(x + 2);
    const uint8_t* sc = x + 4;
    const uint8_t* q = x + 16;
    for (int j = 0, is = 0; j < 256; j += 64, q += 32, is += 2) {
      uint8_t s, m;
      scale_min_k4(is, sc, s, m);
      const float d1 = d * s, m1 = mn * m;
      scale_min_k4(is + 1, sc, s, m);
      const float d2 = d * s, m2 = mn * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

void q6_k(const uint8_t* x, int64_t nb, float* y) {  // {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}
  for (int64_t i = 0; i < nb; ++i, x += 210) {
    const float d = half(x + 208);
    const uint8_t* ql = x;
    const uint8_t* qh = x + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(x + 192);
    for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = int8_t((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = int8_t((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = int8_t((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = int8_t((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
  }
}
}  // namespace

bool can_dequantize(uint32_t t) {
  using namespace ggml_type;
  return t == Q8_0 || t == Q4_0 || t == Q5_0 || t == Q4_K || t == Q6_K;
}

void dequantize_row(uint32_t t, const uint8_t* src, int64_t k, float* out) {
  const GgmlTypeInfo* ti = ggml_type_info(t);
  MX_CHECK(ti && can_dequantize(t) && k % ti->block_size == 0, "cannot dequantize a row of {} {} values", k,
           ti ? ti->name : "?");
  const int64_t nb = k / ti->block_size;
  switch (t) {
    case ggml_type::Q8_0: return q8_0(src, nb, out);
    case ggml_type::Q4_0: return q4_0(src, nb, out);
    case ggml_type::Q5_0: return q5_0(src, nb, out);
    case ggml_type::Q4_K: return q4_k(src, nb, out);
    default: return q6_k(src, nb, out);
  }
}

void mxfp4_row_to_ggml(const uint8_t* packed, const uint8_t* scales, int64_t k, uint8_t* blocks) {
  // The inverse of mxfp4_row_from_ggml below, whole bytes at a time: q[2m] holds
  // elements 2m and 2m + 16, q[2m + 1] elements 2m + 1 and 2m + 17.
  for (int64_t b = 0; b < k / 32; ++b, blocks += 17, packed += 16) {
    blocks[0] = scales[b];
    uint8_t* q = blocks + 1;
    for (int m = 0; m < 8; ++m) {
      q[2 * m] = uint8_t((packed[m] & 0x0F) | (packed[8 + m] << 4));
      q[2 * m + 1] = uint8_t((packed[m] >> 4) | (packed[8 + m] & 0xF0));
    }
  }
}

void mxfp4_row_from_ggml(const uint8_t* blocks, int64_t k, uint8_t* packed, uint8_t* scales) {
  // A block's element j is q[j] & 15 for j < 16 and q[j - 16] >> 4 past; ours packs
  // elements 2m (low nibble) and 2m + 1 in byte m. Whole bytes at a time: the loader
  // runs this over every MXFP4 weight of a GGUF (a nibble at a time took about half of
  // a 1 GB model's load).
  for (int64_t b = 0; b < k / 32; ++b, blocks += 17, packed += 16) {
    scales[b] = blocks[0];
    const uint8_t* q = blocks + 1;
    for (int m = 0; m < 8; ++m) packed[m] = uint8_t((q[2 * m] & 0x0F) | (q[2 * m + 1] << 4));
    for (int m = 0; m < 8; ++m) packed[8 + m] = uint8_t((q[2 * m] >> 4) | (q[2 * m + 1] & 0xF0));
  }
}

}  // namespace mx::ggml
