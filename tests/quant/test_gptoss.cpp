// gpt-oss MXFP4 tensors read as our MXFP4 weights, checked against values
// computed by hand from the HF dequantization rule (low nibble first,
// 2^(scale - 127), gate/up rows interleaved).
#include <gtest/gtest.h>

#include "core/error.h"
#include "quant/dequantize.h"
#include "quant/gptoss.h"

using namespace mx;

TEST(GptOss, ExpertViewAndGateUpSplitMatchHandDecodedValues) {
  const int E = 2, I = 2, H = 32;
  OwnedTensor blocks = OwnedTensor::make(DType::U8, {E, 2 * I, H / 32, 16});
  OwnedTensor scales = OwnedTensor::make(DType::U8, {E, 2 * I, H / 32});
  // Expert 1, row r: byte j = (code hi << 4) | code lo with lo = (r + j) % 8, hi = 8 | (j % 8)
  // (negative), scale 2^(r - 1).
  for (int r = 0; r < 2 * I; ++r) {
    scales.t.as<uint8_t>()[(1 * 2 * I + r)] = uint8_t(127 + r - 1);
    for (int j = 0; j < 16; ++j)
      blocks.t.as<uint8_t>()[(1 * 2 * I + r) * 16 + j] = uint8_t((8 | (j % 8)) << 4 | ((r + j) % 8));
  }
  static const float lut[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  Tensor w = gptoss_expert(blocks.t, scales.t, 1);
  EXPECT_EQ(w.dims(), (std::vector<int64_t>{2 * I, H}));
  OwnedTensor d = dequantize_f32(w);
  for (int r = 0; r < 2 * I; ++r)
    for (int j = 0; j < 16; ++j) {
      const float s = std::ldexp(1.0f, r - 1);
      EXPECT_EQ(d.t.as<float>()[r * H + 2 * j], lut[(r + j) % 8] * s);
      EXPECT_EQ(d.t.as<float>()[r * H + 2 * j + 1], -lut[j % 8] * s);
    }
  GateUp gu = split_gate_up(w);
  OwnedTensor g = dequantize_f32(gu.gate), u = dequantize_f32(gu.up);
  for (int k = 0; k < I; ++k)
    for (int c = 0; c < H; ++c) {
      EXPECT_EQ(g.t.as<float>()[k * H + c], d.t.as<float>()[(2 * k) * H + c]);
      EXPECT_EQ(u.t.as<float>()[k * H + c], d.t.as<float>()[(2 * k + 1) * H + c]);
    }
  EXPECT_THROW(gptoss_expert(blocks.t, scales.t, 2), Error);
}
