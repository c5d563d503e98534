// The BF16 AMX matmul (matmul_bf16_amx.cpp) against its accumulation scheme
// (matmul_impl.h, "BF16 and F8_E4M3 weights on AMX tiles") written out plainly here: the kernel
// on the emulated tiles (amx_tiles.h, EmuTiles) on every AVX512-BF16 CPU, bit for bit
// and batch invariant; and, on a CPU whose AMX is offered, the tile registers bit for
// bit against the emulation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/matmul.h"
#include "backends/cpu/matmul_impl.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "quant/dequantize.h"

namespace {

using namespace mx;

ThreadPool& pool(int n) {
  static ThreadPool p1(1), p2(2);
  return n == 1 ? p1 : p2;
}

// Keeps matmul_amx() on (the dispatcher takes bf16_amx only then) for the scope.
struct AmxOn {
  bool was = set_matmul_amx(true);
  ~AmxOn() { set_matmul_amx(was); }
};

float flush(float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; }

// The scheme for one output: w and x are bf16 values as f32 (x already rounded).
// DAZ on the inputs, FTZ on every result (the test data keeps results away from the
// one-ulp band below 2^-126 where flushing before or after rounding would differ).
float scheme(const float* w, const float* x, int64_t in) {
  float acc = 0.0f;
  for (int64_t c = 0; c * 32 < in; ++c) {
    float e = 0.0f, o = 0.0f;
    for (int p = 0; p < 16; ++p) {
      const int64_t i = c * 32 + 2 * p;
      if (i < in) e = flush(std::fma(flush(w[i]), flush(x[i]), e));
      if (i + 1 < in) o = flush(std::fma(flush(w[i + 1]), flush(x[i + 1]), o));
    }
    acc = flush(acc + flush(e + o));
  }
  return acc;
}

struct Problem {
  int64_t out, in, n;
  std::vector<uint16_t> w;
  std::vector<float> x;
  Tensor tensor() { return Tensor(DType::BF16, {out, in}, w.data()); }
};

Problem make(int64_t out, int64_t in, int64_t n, std::mt19937& rng) {
  Problem p{out, in, n, std::vector<uint16_t>(size_t(out * in)), std::vector<float>(size_t(n * in))};
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (uint16_t& v : p.w) v = f32_to_bf16(nd(rng));
  for (float& v : p.x) v = nd(rng);
  return p;
}

std::vector<float> run(const matmul_detail::Kernels& k, Problem& p, const float* x, int64_t n, int threads) {
  std::vector<float> y(size_t(n * p.out), NAN);
  matmul_detail::run_kernels(k, Isa::Avx512, y.data(), x, p.tensor(), n, pool(threads), nullptr, /*bf16_act=*/true);
  return y;
}

matmul_detail::Kernels emulated() {
  matmul_detail::Kernels k;
  k.bf16_amx = matmul_detail::amx_bf16_kernels_emulated();
  return k;
}

std::string label(const Problem& p) {
  return std::to_string(p.out) + "x" + std::to_string(p.in) + " n=" + std::to_string(p.n);
}

// Shapes: full and partial row blocks (32 rows; 16 per tile), partial chunks of 32
// columns, odd and partial token groups (16 per tile, two per block).
struct Shape {
  int64_t out, in, n;
};
// {40, 4097, 40}: two chunks of token groups (the kernel keeps about 512 KiB of packed
// activations, two groups here, per chunk), the second a lone group.
const Shape kShapes[] = {{1, 1, 1},     {16, 32, 1},   {17, 33, 2},  {32, 64, 16},  {45, 107, 21},
                         {64, 96, 17},  {70, 300, 40}, {96, 31, 33}, {40, 4097, 5}, {40, 4097, 40}};

TEST(MatmulAmx, EmulatedKernelFollowsTheScheme) {
  if (!cpu_features().avx512bf16) GTEST_SKIP() << "the emulated tiles need AVX512-BF16 (" << cpu_features_string() << ")";
  AmxOn on;
  const matmul_detail::Kernels k = emulated();
  std::mt19937 rng(11);
  for (Shape s : kShapes) {
    Problem p = make(s.out, s.in, s.n, rng);
    const std::vector<float> y = run(k, p, p.x.data(), p.n, 2);
    std::vector<float> wf(p.w.size()), xr(p.x.size());
    for (size_t i = 0; i < wf.size(); ++i) wf[i] = bf16_to_f32(p.w[i]);
    for (size_t i = 0; i < xr.size(); ++i) xr[i] = bf16_to_f32(f32_to_bf16(p.x[i]));
    for (int64_t t = 0; t < p.n; ++t)
      for (int64_t o = 0; o < p.out; ++o) {
        const float want = scheme(wf.data() + o * p.in, xr.data() + t * p.in, p.in);
        const float got = y[size_t(t * p.out + o)];
        ASSERT_EQ(0, std::memcmp(&got, &want, 4)) << label(p) << " t=" << t << " o=" << o << ": " << got << " vs " << want;
      }
  }
}

// Row t of an n-token call is bitwise the 1-token call of row t, and the same on 1 and
// 2 threads; denormal weights count as 0 (DAZ), products far below 2^-126 vanish (FTZ),
// and NaN / inf in an activation reach its outputs.
TEST(MatmulAmx, EmulatedKernelIsBatchInvariant) {
  if (!cpu_features().avx512bf16) GTEST_SKIP() << "the emulated tiles need AVX512-BF16 (" << cpu_features_string() << ")";
  AmxOn on;
  const matmul_detail::Kernels k = emulated();
  std::mt19937 rng(12);
  for (Shape s : kShapes) {
    Problem p = make(s.out, s.in, s.n, rng);
    const std::vector<float> y2 = run(k, p, p.x.data(), p.n, 2), y1 = run(k, p, p.x.data(), p.n, 1);
    ASSERT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4)) << label(p) << " 1 vs 2 threads";
    for (int64_t t = 0; t < p.n; ++t) {
      const std::vector<float> one = run(k, p, p.x.data() + t * p.in, 1, 1);
      ASSERT_EQ(0, std::memcmp(one.data(), y2.data() + t * p.out, one.size() * 4)) << label(p) << " row " << t;
    }
  }
  Problem p = make(3, 64, 2, rng);
  for (int64_t i = 0; i < 64; ++i) {
    p.w[size_t(i)] = uint16_t(i % 2 ? 0x0001 : 0x8003);  // row 0: denormal weights
    p.w[size_t(64 + i)] = f32_to_bf16(std::ldexp(1.0f, -70));  // row 1: products 2^-140, denormal
  }
  p.x[5] = NAN;
  p.x[64 + 63] = INFINITY;
  for (int64_t i = 0; i < 64; ++i)
    if (i != 5) p.x[size_t(i)] = std::ldexp(1.0f, -70);
  const std::vector<float> y = run(k, p, p.x.data(), 2, 1);
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]) && std::isnan(y[2])) << "token 0 holds a NaN";
  for (int o = 0; o < 3; ++o) EXPECT_FALSE(std::isfinite(y[3 + o])) << o;
  p.x[5] = std::ldexp(1.0f, -70);
  const std::vector<float> z = run(k, p, p.x.data(), 1, 1);
  EXPECT_EQ(z[0], 0.0f) << "denormal weights count as 0";
  EXPECT_EQ(z[1], 0.0f) << "denormal products (2^-140) flush to 0";
}

// F8_E4M3 weights on the tiles: bitwise the BF16 matmul of the dequantized weight
// rounded to bf16 (as on the vdpbf16ps kernels), with block scales of either sign and
// row blocks that straddle a 128-row scale block.
TEST(MatmulAmx, EmulatedFp8IsTheBf16OfItsDequantizedWeight) {
  if (!cpu_features().avx512bf16) GTEST_SKIP() << "the emulated tiles need AVX512-BF16 (" << cpu_features_string() << ")";
  AmxOn on;
  matmul_detail::Kernels k;
  k.bf16_amx = matmul_detail::amx_bf16_kernels_emulated();
  k.fp8_amx = matmul_detail::amx_fp8_kernels_emulated();
  std::mt19937 rng(14);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(1e-3f, 1e-1f);
  for (Shape s : {Shape{130, 300, 17}, Shape{45, 107, 21}, Shape{257, 129, 3}}) {
    std::vector<uint8_t> codes(size_t(s.out * s.in));
    for (uint8_t& c : codes) {
      do c = uint8_t(byte(rng));
      while ((c & 0x7f) == 0x7f);  // no NaN codes
    }
    std::vector<float> scales(size_t((s.out + 127) / 128 * ((s.in + 127) / 128)));
    for (float& v : scales) v = scale(rng);
    scales[0] = -scales[0];
    Tensor fp8(DType::F8_E4M3, {s.out, s.in}, codes.data());
    fp8.scales = scales.data();
    const OwnedTensor dq = dequantize_f32(fp8);
    Problem p = make(s.out, s.in, s.n, rng);
    for (size_t i = 0; i < p.w.size(); ++i) p.w[i] = f32_to_bf16(dq.t.as<float>()[i]);
    std::vector<float> y(size_t(s.n * s.out), NAN);
    matmul_detail::run_kernels(k, Isa::Avx512, y.data(), p.x.data(), fp8, s.n, pool(2), nullptr, /*bf16_act=*/true);
    const std::vector<float> want = run(k, p, p.x.data(), p.n, 2);
    ASSERT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4)) << label(p);
  }
}

// Where AMX is offered, the tile registers give the emulation's bits (the kernels are
// offered only after a smaller check of the same; this one covers every shape above),
// and the dispatcher takes them for BF16 weights.
TEST(MatmulAmx, HardwareGivesTheEmulatedBits) {
  if (!cpu_features().avx512bf16) GTEST_SKIP() << "no AMX: this CPU has no AVX512-BF16 (" << cpu_features_string() << ")";
  const matmul_detail::DtypeKernels hw = matmul_detail::amx_bf16_kernels();
  if (!hw.ok() || matmul_detail::amx_emulated())
    GTEST_SKIP() << "no AMX tile registers offered here: " << matmul_detail::amx_status() << " (" << cpu_model_name()
                 << ")";
  AmxOn on;
  matmul_detail::Kernels k;
  k.bf16_amx = hw;
  k.fp8_amx = matmul_detail::amx_fp8_kernels();
  matmul_detail::Kernels e = emulated();
  e.fp8_amx = matmul_detail::amx_fp8_kernels_emulated();
  std::mt19937 rng(13);
  std::uniform_int_distribution<int> byte(0, 126);  // F8_E4M3 codes, no NaN
  for (Shape s : kShapes) {
    Problem p = make(s.out, s.in, s.n, rng);
    const std::vector<float> a = run(k, p, p.x.data(), p.n, 2), b = run(e, p, p.x.data(), p.n, 2);
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << label(p);
    std::vector<uint8_t> codes(p.w.size());
    for (uint8_t& c : codes) c = uint8_t(byte(rng) | (byte(rng) & 1) << 7);
    const Tensor fp8(DType::F8_E4M3, {s.out, s.in}, codes.data());
    std::vector<float> f_hw(a.size(), NAN), f_emu(a.size(), NAN);
    matmul_detail::run_kernels(k, Isa::Avx512, f_hw.data(), p.x.data(), fp8, s.n, pool(2), nullptr, true);
    matmul_detail::run_kernels(e, Isa::Avx512, f_emu.data(), p.x.data(), fp8, s.n, pool(2), nullptr, true);
    ASSERT_EQ(0, std::memcmp(f_hw.data(), f_emu.data(), a.size() * 4)) << label(p) << " F8_E4M3";
    if (matmul_bf16_activations(Isa::Avx512)) {
      std::vector<float> d(a.size(), NAN);
      matmul(d.data(), p.x.data(), p.tensor(), p.n, pool(2));
      ASSERT_EQ(0, std::memcmp(a.data(), d.data(), a.size() * 4)) << label(p) << " dispatched";
    }
  }
}

// A weight with no columns: every output +0, as on the other kernels.
TEST(MatmulAmx, EmulatedKernelOnEmptyRows) {
  if (!cpu_features().avx512bf16) GTEST_SKIP() << "the emulated tiles need AVX512-BF16 (" << cpu_features_string() << ")";
  AmxOn on;
  std::mt19937 rng(15);
  Problem p = make(5, 0, 3, rng);
  matmul_detail::Kernels k = emulated();
  k.fp8_amx = matmul_detail::amx_fp8_kernels_emulated();
  for (const std::vector<float>& y : {run(k, p, p.x.data(), 3, 1), [&] {
         std::vector<float> f(15, NAN);
         uint8_t none = 0;
         matmul_detail::run_kernels(k, Isa::Avx512, f.data(), p.x.data(), Tensor(DType::F8_E4M3, {5, 0}, &none), 3,
                                    pool(1), nullptr, /*bf16_act=*/true);
         return f;
       }()})
    for (float v : y) EXPECT_EQ(0, std::memcmp(&v, "\0\0\0\0", 4)) << v;
}

TEST(MatmulAmx, StatusSaysWhy) {
  const std::string s = matmul_amx_status();
  EXPECT_TRUE(s.rfind("on: ", 0) == 0 || s.rfind("off: ", 0) == 0) << s;
  EXPECT_EQ(matmul_amx(Isa::Avx512), s.rfind("on: ", 0) == 0) << s;
  const bool was = set_matmul_amx(false);
  EXPECT_FALSE(matmul_amx(Isa::Avx512));
  EXPECT_EQ(matmul_amx_status().rfind("off: switched off (", 0), 0u) << matmul_amx_status();
  EXPECT_STREQ(matmul_amx_name(Isa::Avx512), "");
  set_matmul_amx(was);
}

}  // namespace
