// MXFP4 format (quant/mxfp4.h): E2M1 element encoding, the E8M0 scale rule, block
// special cases and the Quark nibble order.
#include "quant/mxfp4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "test_util.h"

namespace {

using namespace mx::mxfp4;

TEST(Mxfp4, EncodesEveryRepresentableValue) {
  for (uint8_t c = 0; c < 16; ++c) {
    EXPECT_EQ(f32_to_e2m1(kE2M1[c]), c) << "code " << int(c) << " value " << kE2M1[c];
    // Scaled by any power of two the block scale can carry, still the same code.
    EXPECT_EQ(kE2M1[f32_to_e2m1(kE2M1[c])], kE2M1[c]);
  }
  EXPECT_EQ(f32_to_e2m1(-0.0f), 8);  // the sign of zero is kept
  EXPECT_EQ(f32_to_e2m1(0.0f), 0);
}

TEST(Mxfp4, MidpointsTieToEven) {
  // {midpoint, code below, code above}: the tie goes to the code with an even mantissa bit.
  struct Tie { float mid; uint8_t expect; };
  const Tie ties[] = {{0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4}, {2.5f, 4}, {3.5f, 6}, {5.0f, 6}};
  for (const Tie& t : ties) {
    EXPECT_EQ(f32_to_e2m1(t.mid), t.expect) << t.mid;
    EXPECT_EQ(f32_to_e2m1(-t.mid), t.expect | 8) << -t.mid;
    // Just off the midpoint: nearest wins.
    const float below = std::nextafter(t.mid, 0.0f), above = std::nextafter(t.mid, 10.0f);
    const uint8_t lo = f32_to_e2m1(below), hi = f32_to_e2m1(above);
    EXPECT_LT(kE2M1[lo], t.mid);
    EXPECT_GT(kE2M1[hi], t.mid);
    EXPECT_EQ(hi, lo + 1) << t.mid;
  }
}

TEST(Mxfp4, SaturatesBeyondSix) {
  for (float v : {6.0f, 6.5f, 7.0f, 100.0f, 1e30f, INFINITY}) {
    EXPECT_EQ(f32_to_e2m1(v), 7) << v;
    EXPECT_EQ(f32_to_e2m1(-v), 15) << -v;
  }
}

// f32_to_e2m1 against the definition (the nearest of the 8 magnitudes, measured in
// double; a tie to the even code; NaN saturates) on floats of every exponent, both
// signs, and every float within 64 ulps of each midpoint and representable value.
TEST(Mxfp4, ElementCodeIsTheNearestValue) {
  auto nearest = [](float v) {
    const uint8_t sign = std::signbit(v) ? 8 : 0;
    if (std::isnan(v)) return uint8_t(sign | 7);
    const double a = std::fabs(double(v));  // a - kE2M1[c] is exact in double from 2^-50 up (ties need a >= 0.25)
    if (a >= 6) return uint8_t(sign | 7);    // saturating
    int best = 0;
    for (int c = 1; c < 8; ++c) {
      const double d = std::fabs(kE2M1[c] - a), db = std::fabs(kE2M1[best] - a);
      if (d < db || (d == db && (c & 1) == 0)) best = c;
    }
    return uint8_t(sign | best);
  };
  std::vector<float> vs = mxtest::sampled_floats(7919);
  for (float m : {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f}) {
    float lo = m, hi = m;
    for (int k = 0; k < 64; ++k, lo = std::nextafter(lo, -1.0f), hi = std::nextafter(hi, 10.0f)) {
      vs.push_back(lo), vs.push_back(hi), vs.push_back(-lo), vs.push_back(-hi);
    }
  }
  for (float v : {INFINITY, -INFINITY, NAN, -NAN, 1e-45f, -1e-45f}) vs.push_back(v);
  int bad = 0;
  for (float v : vs)
    if (f32_to_e2m1(v) != nearest(v) && ++bad <= 10) ADD_FAILURE() << "value " << v << " code " << int(f32_to_e2m1(v));
  EXPECT_EQ(bad, 0) << "of " << vs.size();
}

// A block's codes are f32_to_e2m1(x / 2^e) for its scale 2^e, at the ends of the
// range too: elements from 2^-149 to 2^127, so scales from 2^-127 (a subnormal,
// its inverse 2^127) to 2^125, the largest a float block can get.
TEST(Mxfp4, BlockCodesAreTheValuesOverTheScale) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int e : {-149, -140, -130, -126, -125, -100, 0, 60, 120, 125, 126, 127}) {
    for (ScaleRule rule : {ScaleRule::Spec, ScaleRule::Search}) {
      float x[32];
      for (float& v : x) v = std::ldexp(u(rng), e);
      x[7] = std::ldexp(e < 127 ? 1.5f : 1.0f, e);
      uint8_t packed[16];
      const uint8_t s = quantize_block(x, packed, rule);
      ASSERT_NE(s, 0xFF) << e;
      const float scale = std::ldexp(1.0f, int(s) - 127);
      for (int i = 0; i < 32; ++i)
        EXPECT_EQ((packed[i / 2] >> (i % 2 ? 4 : 0)) & 15, f32_to_e2m1(x[i] / scale)) << "2^" << e << " element " << i;
    }
  }
}

TEST(Mxfp4, ScaleRuleIsFloorLog2AmaxMinus2) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-100, 100);
  uint8_t packed[16];
  for (int k = 0; k < 500; ++k) {
    float x[32];
    const int e = ex(rng);
    const float amax = std::ldexp(k % 10 == 0 ? 1.0f : mant(rng), e);  // exact powers of two too
    for (float& v : x) v = std::uniform_real_distribution<float>(-amax, amax)(rng);
    x[k % 32] = k % 2 ? amax : -amax;
    const uint8_t s = quantize_block(x, packed, ScaleRule::Spec);
    EXPECT_EQ(int(s), 127 + e - 2) << "amax " << amax;
    // The block maximum lands in [4, 8) before rounding, so its code is 4.0 or 6.0.
    const int i = k % 32;
    EXPECT_GE(std::fabs(kE2M1[(packed[i / 2] >> (i % 2 ? 4 : 0)) & 15]), 4.0f) << "amax " << amax;
  }
  // Just below a power of two the exponent is still the lower one (log2 rounding).
  for (int e : {-120, -30, -1, 0, 1, 2, 7, 60, 100, 126}) {
    float x[32] = {};
    x[0] = std::nextafter(std::ldexp(1.0f, e), 0.0f);
    EXPECT_EQ(int(quantize_block(x, packed, ScaleRule::Spec)), 127 + (e - 1) - 2) << "2^" << e << " - ulp";
    x[0] = std::ldexp(1.0f, e);
    EXPECT_EQ(int(quantize_block(x, packed, ScaleRule::Spec)), 127 + e - 2) << "2^" << e;
  }
  // Clamped at 2^-127 for tiny blocks.
  float tiny[32] = {};
  tiny[3] = 1e-40f;
  EXPECT_EQ(quantize_block(tiny, packed, ScaleRule::Spec), 0);
}

TEST(Mxfp4, AllZeroBlock) {
  float x[32] = {};
  uint8_t packed[16];
  std::memset(packed, 0xAB, 16);
  const uint8_t s = quantize_block(x, packed, ScaleRule::Spec);
  EXPECT_EQ(s, 0);  // shared_exp clamps to -127
  for (uint8_t b : packed) EXPECT_EQ(b, 0);
  float out[32];
  dequantize_row(packed, &s, 32, out);
  for (float v : out) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(quantize_block(x, packed, ScaleRule::Search), 0);
}

TEST(Mxfp4, NonFiniteBlockGetsNanScale) {
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    float x[32];
    for (int i = 0; i < 32; ++i) x[i] = float(i) * 0.1f;
    x[5] = bad;
    uint8_t packed[16];
    for (ScaleRule rule : {ScaleRule::Spec, ScaleRule::Search}) {
      EXPECT_EQ(quantize_block(x, packed, rule), 0xFF) << bad;
      for (uint8_t b : packed) EXPECT_EQ(b, 0);
      const uint8_t s = 0xFF;
      float out[32];
      dequantize_row(packed, &s, 32, out);
      for (float v : out) EXPECT_TRUE(std::isnan(v));
    }
  }
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xFF)));
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(0), 0x1p-127f);
  EXPECT_EQ(e8m0_to_f32(254), 0x1p127f);
}

TEST(Mxfp4, NibbleOrderElement2jLow) {
  // Values exactly representable with scale 1 (amax 6 -> shared_exp 0).
  float x[64];
  for (int i = 0; i < 64; ++i) x[i] = kE2M1[(i * 7 + 3) % 16];
  x[0] = 1.0f;   // code 2
  x[1] = -6.0f;  // code 15
  uint8_t packed[32], scales[2];
  quantize_row(x, 64, packed, scales, ScaleRule::Spec);
  EXPECT_EQ(scales[0], 127);
  EXPECT_EQ(packed[0], 0xF2);  // element 0 low nibble, element 1 high nibble
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(kE2M1[packed[j] & 15], x[2 * j]) << j;
    EXPECT_EQ(kE2M1[packed[j] >> 4], x[2 * j + 1]) << j;
  }
  float out[64];
  dequantize_row(packed, scales, 64, out);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(out[i], x[i]) << i;
}

TEST(Mxfp4, SearchNeverWorseThanSpec) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  int better = 0;
  for (int k = 0; k < 2000; ++k) {
    float x[32];
    for (float& v : x) v = k % 2 ? g(rng) : u(rng) * std::ldexp(1.0f, k % 20 - 10);
    auto err = [&](ScaleRule rule) {
      uint8_t packed[16];
      const uint8_t s = quantize_block(x, packed, rule);
      float out[32];
      dequantize_row(packed, &s, 32, out);
      double e = 0;
      for (int i = 0; i < 32; ++i) e += double(out[i] - x[i]) * (out[i] - x[i]);
      return e;
    };
    const double spec = err(ScaleRule::Spec), search = err(ScaleRule::Search);
    EXPECT_LE(search, spec * (1 + 1e-6)) << "block " << k;
    better += search < spec;
  }
  EXPECT_GT(better, 0);  // the search does find better scales sometimes
}

}  // namespace
