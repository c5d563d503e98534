// Element-wise and row-wise ops against straightforward references.
#include "backends/cpu/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "backends/cpu/activation.h"
#include "backends/cpu_test_util.h"

namespace {

using namespace mx;

std::vector<float> random_vec(size_t n, std::mt19937& rng, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

// llama2.c's rmsnorm, verbatim in spirit: float sum of squares, weight * (ss * x).
void llama2c_rmsnorm(float* o, const float* x, const float* weight, int size, float eps) {
  float ss = 0.0f;
  for (int j = 0; j < size; j++) ss += x[j] * x[j];
  ss /= size;
  ss += eps;
  ss = 1.0f / sqrtf(ss);
  for (int j = 0; j < size; j++) o[j] = weight[j] * (ss * x[j]);
}

TEST(Ops, RmsnormMatchesLlama2c) {
  std::mt19937 rng(1);
  const int64_t rows = 3;
  for (int64_t dim : {1, 7, 64, 288, 4096})
    for (DType dt : {DType::F32, DType::BF16}) {
      std::vector<float> x = random_vec(size_t(rows * dim), rng, -3, 3);
      std::vector<float> wf = random_vec(size_t(dim), rng, 0.5, 1.5);
      std::vector<uint16_t> wb(wf.size());
      for (size_t i = 0; i < wf.size(); ++i) {
        wb[i] = f32_to_bf16(wf[i]);
        if (dt == DType::BF16) wf[i] = bf16_to_f32(wb[i]);
      }
      void* wp = dt == DType::F32 ? static_cast<void*>(wf.data()) : wb.data();
      std::vector<float> y(x.size()), ref(x.size());
      rmsnorm(y.data(), x.data(), Tensor(dt, {dim}, wp), rows, dim, 1e-5f);
      for (int64_t r = 0; r < rows; ++r)
        llama2c_rmsnorm(ref.data() + r * dim, x.data() + r * dim, wf.data(), int(dim), 1e-5f);
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_NEAR(y[i], ref[i], 1e-5 * std::fabs(ref[i]) + 1e-7) << "dim=" << dim << " i=" << i;

      // In place (y == x) gives the same bits.
      std::vector<float> xi = x;
      rmsnorm(xi.data(), xi.data(), Tensor(dt, {dim}, wp), rows, dim, 1e-5f);
      EXPECT_EQ(0, std::memcmp(xi.data(), y.data(), y.size() * 4));
    }
}

TEST(Ops, RmsnormRejectsBadWeight) {
  float x[4] = {1, 2, 3, 4}, y[4], w[4] = {1, 1, 1, 1};
  EXPECT_THROW(rmsnorm(y, x, Tensor(DType::F32, {3}, w), 1, 4, 1e-5f), Error);
  EXPECT_THROW(rmsnorm(y, x, Tensor(DType::F16, {4}, w), 1, 4, 1e-5f), Error);
  EXPECT_THROW(add_bias(x, Tensor(DType::I8, {4}, w), 1, 4), Error);
}

TEST(Ops, AddBias) {
  std::mt19937 rng(2);
  const int64_t rows = 3, dim = 37;
  std::vector<float> x = random_vec(size_t(rows * dim), rng), b = random_vec(size_t(dim), rng);
  std::vector<uint16_t> bb(b.size());
  for (size_t i = 0; i < b.size(); ++i) bb[i] = f32_to_bf16(b[i]);
  std::vector<float> xf = x, xb = x;
  add_bias(xf.data(), Tensor(DType::F32, {dim}, b.data()), rows, dim);
  add_bias(xb.data(), Tensor(DType::BF16, {dim}, bb.data()), rows, dim);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < dim; ++i) {
      EXPECT_EQ(xf[r * dim + i], x[r * dim + i] + b[i]);
      EXPECT_EQ(xb[r * dim + i], x[r * dim + i] + bf16_to_f32(bb[i]));
    }
}

// silu_mul on every ISA this CPU has (activation.h): within a few ulps of the
// double-precision value over the range activations take, each element's bits
// independent of where it sits (vector body or tail, any n or offset), the
// saturated ends and NaN as the formula gives them.
TEST(Ops, SiluMulOnEveryIsa) {
  std::mt19937 rng(5);
  const int64_t n = 4099;
  std::vector<float> g = random_vec(n, rng, -30, 30), u = random_vec(n, rng, -2, 2);
  g[0] = 0.0f, g[1] = -0.0f, g[2] = 100.0f, g[3] = -100.0f, g[4] = 1e-30f, g[5] = -1e-30f;
  for (Isa isa : mxtest::cpu_isas()) {
    SCOPED_TRACE(isa_name(isa));
    std::vector<float> y(n);
    silu_mul_isa(isa, y.data(), g.data(), u.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double ref = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * double(u[i]);
      ASSERT_NEAR(y[i], ref, 4e-7 * std::fabs(ref) + 1e-30) << "g " << g[i] << " u " << u[i];
    }
    EXPECT_EQ(y[2], 100.0f * u[2]);
    // Any cut: the same bits per element.
    for (int64_t off : {1, 7, 15, 16, 17}) {
      const int64_t len = n - off - 3;
      std::vector<float> z(len);
      silu_mul_isa(isa, z.data(), g.data() + off, u.data() + off, len);
      ASSERT_EQ(0, std::memcmp(z.data(), y.data() + off, size_t(len) * 4)) << off;
    }
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float gn[3] = {nan, 1.0f, -1.0f}, un[3] = {1.0f, nan, 0.0f};
    float yn[3];
    silu_mul_isa(isa, yn, gn, un, 3);
    EXPECT_TRUE(std::isnan(yn[0]));
    EXPECT_TRUE(std::isnan(yn[1]));
    EXPECT_EQ(yn[2], -0.0f);
  }
}

TEST(Ops, SiluMulAndAdd) {
  std::mt19937 rng(3);
  const int64_t n = 1001;
  std::vector<float> g = random_vec(n, rng, -8, 8), u = random_vec(n, rng), y(n);
  silu_mul(y.data(), g.data(), u.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double ref = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * double(u[i]);
    ASSERT_NEAR(y[i], ref, 1e-6 * std::fabs(ref) + 1e-7) << i;
  }
  std::vector<float> g2 = g;  // aliasing y == g, as the MLP does
  silu_mul(g2.data(), g2.data(), u.data(), n);
  EXPECT_EQ(0, std::memcmp(g2.data(), y.data(), n * 4));

  std::vector<float> a = g;
  add_inplace(a.data(), u.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(a[i], g[i] + u[i]);
}

TEST(Ops, Softmax) {
  std::mt19937 rng(4);
  for (int64_t n : {1, 2, 17, 1000}) {
    std::vector<float> x = random_vec(size_t(n), rng, -20, 20), y = x;
    softmax_inplace(y.data(), n);
    double m = -INFINITY, s = 0;
    for (float v : x) m = std::max(m, double(v));
    for (float v : x) s += std::exp(double(v) - m);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(y[i], std::exp(double(x[i]) - m) / s, 1e-6) << "n=" << n << " i=" << i;
  }
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {-inf, 0.0f, -inf, std::log(3.0f)};
  softmax_inplace(x.data(), 4);
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_EQ(x[2], 0.0f);
  EXPECT_NEAR(x[1], 0.25f, 1e-7);
  EXPECT_NEAR(x[3], 0.75f, 1e-7);
  std::vector<float> all = {-inf, -inf, -inf};
  softmax_inplace(all.data(), 3);
  for (float v : all) EXPECT_EQ(v, 0.0f);
}

// The documented order: 16 interleaved partials, then a pairwise tree.
float dot_documented_order(const float* a, const float* b, int64_t n) {
  float p[16] = {};
  for (int64_t i = 0; i < n; ++i) p[i % 16] += a[i] * b[i];
  for (int half = 8; half >= 1; half /= 2)
    for (int l = 0; l < half; ++l) p[l] += p[l + half];
  return p[0];
}

TEST(Ops, DotFixedOrder) {
  std::mt19937 rng(5);
  for (int64_t n : {0, 1, 5, 16, 31, 64, 128, 1000}) {
    // Copies at several misalignments must give the same bits.
    std::vector<float> a = random_vec(size_t(n) + 8, rng), b = random_vec(size_t(n) + 8, rng);
    const float base = dot_f32(a.data(), b.data(), n);
    EXPECT_EQ(base, dot_documented_order(a.data(), b.data(), n)) << n;
    for (int off = 1; off < 4; ++off) {
      std::vector<float> a2(size_t(n) + 8), b2(size_t(n) + 8);
      std::memcpy(a2.data() + off, a.data(), size_t(n) * 4);
      std::memcpy(b2.data() + off, b.data(), size_t(n) * 4);
      EXPECT_EQ(base, dot_f32(a2.data() + off, b2.data() + off, n)) << n << " off " << off;
    }
    double ref = 0;
    for (int64_t i = 0; i < n; ++i) ref += double(a[i]) * double(b[i]);
    EXPECT_NEAR(base, ref, 1e-5 * std::sqrt(double(n) + 1));
  }
}

TEST(Ops, Axpy) {
  std::mt19937 rng(6);
  const int64_t n = 77;
  std::vector<float> y = random_vec(n, rng), x = random_vec(n, rng), y0 = y;
  axpy_f32(y.data(), 0.37f, x.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], y0[i] + 0.37f * x[i]);
}

}  // namespace
