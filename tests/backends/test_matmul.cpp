// matmul: every ISA path this CPU supports against a double-precision reference,
// and the batch-invariance contract (row t bitwise independent of n_tokens, the
// other rows and the thread count).
#include "backends/cpu/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "backends/cpu/matmul_impl.h"
#include "backends/cpu_test_util.h"

namespace {

using namespace mx;

using mxtest::cpu_isas;

ThreadPool& pool1() {
  static ThreadPool p(1);
  return p;
}
ThreadPool& pool2() {
  static ThreadPool p(2);
  return p;
}

// A weight matrix in F32 or BF16, plus its exact values as f32 for the reference.
struct Weights {
  DType dtype;
  int64_t out, in;
  std::vector<float> f32;      // exact values (bf16-representable when dtype is BF16)
  std::vector<uint16_t> bf16;  // storage when dtype is BF16
  Tensor tensor() {
    void* p = dtype == DType::F32 ? static_cast<void*>(f32.data()) : bf16.data();
    return Tensor(dtype, {out, in}, p);
  }
};

Weights make_weights(DType dt, int64_t out, int64_t in, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Weights w{dt, out, in, std::vector<float>(size_t(out * in)), {}};
  for (float& v : w.f32) v = u(rng);
  if (dt == DType::BF16) {
    w.bf16.resize(w.f32.size());
    for (size_t i = 0; i < w.f32.size(); ++i) {
      w.bf16[i] = f32_to_bf16(w.f32[i]);
      w.f32[i] = bf16_to_f32(w.bf16[i]);
    }
  }
  return w;
}

std::vector<float> random_vec(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

// round_x: the kernel multiplies activations rounded to bf16 (matmul_bf16_activations).
void expect_close_to_reference(const std::vector<float>& y, const std::vector<float>& x,
                               const Weights& w, int64_t n, const std::string& what, bool round_x = false) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t o = 0; o < w.out; ++o) {
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < w.in; ++i) {
        const float xi = round_x ? bf16_to_f32(f32_to_bf16(x[t * w.in + i])) : x[t * w.in + i];
        const double p = double(w.f32[o * w.in + i]) * double(xi);
        ref += p;
        mag += std::fabs(p);
      }
      // f32 accumulation error grows ~sqrt(in); a dropped or doubled element
      // (|p| ~ mag / in) is still far outside this bound.
      const double tol = 3e-7 * std::sqrt(double(w.in) + 1) * mag + 1e-30;
      ASSERT_NEAR(y[t * w.out + o], ref, tol) << what << " t=" << t << " o=" << o;
    }
}

std::string label(Isa isa, DType dt, int64_t out, int64_t in, int64_t n) {
  return std::string(isa_name(isa)) + " " + dtype_name(dt) + " out=" + std::to_string(out) +
         " in=" + std::to_string(in) + " n=" + std::to_string(n);
}

TEST(Matmul, MatchesDoubleReferenceAllIsas) {
  std::mt19937 rng(1234);
  for (Isa isa : cpu_isas())
    for (DType dt : {DType::F32, DType::BF16})
      for (int64_t in : {1, 7, 16, 33, 100, 257, 4097})
        for (int64_t out : {1, 3, 17, 49})
          for (int64_t n : {1, 2, 5, 17}) {
            Weights w = make_weights(dt, out, in, rng);
            std::vector<float> x = random_vec(size_t(n * in), rng);
            std::vector<float> y(size_t(n * out), NAN);
            matmul_isa(isa, y.data(), x.data(), w.tensor(), n, pool2());
            expect_close_to_reference(y, x, w, n, label(isa, dt, out, in, n),
                                      dt == DType::BF16 && matmul_bf16_activations(isa));
          }
}

// Row t of an n-token matmul equals, bit for bit, the 1-token matmul of row t,
// a shorter batch that contains row t, and the same call on another thread count.
TEST(Matmul, BatchInvariantBitwise) {
  std::mt19937 rng(99);
  struct Shape { int64_t out, in, n; };
  for (Isa isa : cpu_isas())
    for (DType dt : {DType::F32, DType::BF16})
      for (Shape s : {Shape{49, 4097, 17}, Shape{200, 100, 9}, Shape{75, 33, 6}, Shape{31, 1, 5}}) {
        const std::string what = label(isa, dt, s.out, s.in, s.n);
        Weights w = make_weights(dt, s.out, s.in, rng);
        const Tensor wt = w.tensor();
        std::vector<float> x = random_vec(size_t(s.n * s.in), rng);
        std::vector<float> full2(size_t(s.n * s.out)), full1(full2.size());
        matmul_isa(isa, full2.data(), x.data(), wt, s.n, pool2());
        matmul_isa(isa, full1.data(), x.data(), wt, s.n, pool1());
        EXPECT_EQ(0, std::memcmp(full1.data(), full2.data(), full1.size() * 4)) << what;

        std::vector<float> one(size_t(s.out));
        for (int64_t t = 0; t < s.n; ++t) {
          matmul_isa(isa, one.data(), x.data() + t * s.in, wt, 1, pool2());
          EXPECT_EQ(0, std::memcmp(one.data(), full2.data() + t * s.out, one.size() * 4))
              << what << " row " << t << " (1 token vs batch)";
        }
        // A shorter batch starting at row 1, with different rows around it.
        const int64_t m = s.n / 2 + 1;
        std::vector<float> x2 = random_vec(size_t(m * s.in), rng);
        std::memcpy(x2.data(), x.data() + s.in, size_t(s.in) * 4);
        std::vector<float> part(size_t(m * s.out));
        matmul_isa(isa, part.data(), x2.data(), wt, m, pool1());
        EXPECT_EQ(0, std::memcmp(part.data(), full2.data() + s.out, size_t(s.out) * 4))
            << what << " (row 1 in a batch of " << m << ")";
      }
}

// The vdpbf16ps kernels (matmul_bf16dot_avx512.cpp), reached whatever
// MXSERVE_BF16_ACTIVATIONS says: against the double product of the bf16-rounded
// activations, batch invariant, and NaN / inf in an activation reach its outputs.
TEST(Matmul, Bf16ActivationKernels) {
  if (!cpu_features().avx512bf16) GTEST_SKIP() << "this CPU has no AVX512-BF16 (" << cpu_features_string() << ")";
  matmul_detail::Kernels k;
  k.bf16_dot = matmul_detail::avx512_bf16dot_kernels();
  auto run = [&](std::vector<float>& y, const std::vector<float>& x, Weights& w, int64_t n, ThreadPool& pool) {
    matmul_detail::run_kernels(k, Isa::Avx512, y.data(), x.data(), w.tensor(), n, pool, nullptr, /*bf16_act=*/true);
  };
  std::mt19937 rng(77);
  for (int64_t in : {1, 15, 16, 31, 32, 33, 100, 4097})
    for (int64_t out : {1, 17, 49})
      for (int64_t n : {1, 3, 9, 17}) {
        Weights w = make_weights(DType::BF16, out, in, rng);
        std::vector<float> x = random_vec(size_t(n * in), rng), y(size_t(n * out), NAN), one(static_cast<size_t>(out));
        run(y, x, w, n, pool2());
        const std::string what = "bf16dot out=" + std::to_string(out) + " in=" + std::to_string(in) + " n=" + std::to_string(n);
        expect_close_to_reference(y, x, w, n, what, /*round_x=*/true);
        for (int64_t t = 0; t < n; ++t) {
          std::vector<float> xt(x.begin() + t * in, x.begin() + (t + 1) * in);
          run(one, xt, w, 1, pool1());
          ASSERT_EQ(0, std::memcmp(one.data(), y.data() + t * out, size_t(out) * 4)) << what << " row " << t;
        }
      }
  Weights w = make_weights(DType::BF16, 3, 40, rng);
  std::vector<float> x = random_vec(2 * 40, rng), y(6);
  x[5] = NAN;
  x[40 + 39] = INFINITY;
  run(y, x, w, 2, pool1());
  for (int o = 0; o < 3; ++o) {
    EXPECT_TRUE(std::isnan(y[o])) << o;
    EXPECT_FALSE(std::isfinite(y[3 + o])) << o;
  }
}

// The GEMM's FMA tiles (KernelConfig::fma: vdpbf16ps's products as two rounded FMAs,
// offered where this CPU's vdpbf16ps is exactly that) give the vdpbf16ps tiles' bits,
// and each token's row is the 1-token (GEMV, vdpbf16ps) row: rows with a tail, long
// rows in column blocks, rows left over by the tile, every blocking, and rows whose
// products underflow (FTZ), whose weights are denormal (DAZ), or whose lanes are
// normal but sum to a denormal (the tree's adds are not flushed).
TEST(Matmul, Bf16FmaTilesGiveTheVdpbf16psBits) {
  if (!matmul_bf16_activations(Isa::Avx512))
    GTEST_SKIP() << "no bf16-activation kernels on this CPU (" << cpu_features_string() << ")";
  // The vdpbf16ps kernels, also where BF16 weights would run on AMX (test_matmul_amx.cpp).
  struct AmxOff {
    bool was = set_matmul_amx(false);
    ~AmxOff() { set_matmul_amx(was); }
  } amx_off;
  std::vector<KernelConfig> fma;
  for (const KernelConfig& c : matmul_candidates(Isa::Avx512, DType::BF16))
    if (c.fma) fma.push_back(c);
  if (fma.empty())
    GTEST_SKIP() << "this CPU's vdpbf16ps is not two rounded FMAs, so no FMA tiles (" << cpu_model_name() << ")";
  std::mt19937 rng(31);
  struct Shape { int64_t out, in, n; };
  // 2048 and 2080: the longest rows the FMA tiles read widened activations for, and rows
  // just past them (column blocks, widened in the tiles).
  for (Shape s : {Shape{49, 4097, 17}, Shape{77, 301, 40}, Shape{13, 32, 9}, Shape{19, 2048, 13}, Shape{19, 2080, 13}}) {
    Weights w = make_weights(DType::BF16, s.out, s.in, rng);
    std::vector<float> x = random_vec(size_t(s.n * s.in), rng);
    auto wset = [&](int64_t o, int64_t i, float v) { w.bf16[size_t(o * s.in + i)] = f32_to_bf16(v); };
    for (int64_t i = 0; i < s.in; ++i) {
      wset(0, i, 0.0f);                                                   // row 0: lanes 0 and 1 only
      wset(1, i, std::ldexp(1.0f + float(i % 7) / 8, -70) * (i % 2 ? 1 : -1));  // row 1: products ~2^-130
      w.bf16[size_t(2 * s.in + i)] = uint16_t(i % 3 ? 0x0001 : 0x8003);  // row 2: denormal weights
    }
    wset(0, 0, std::ldexp(1.5f, -63));  // lane 0: 1.5 * 2^-126; lane 1: -1.25 * 2^-126; sum 2^-128
    wset(0, 2, std::ldexp(-1.25f, -63));
    for (int64_t t = 0; t < s.n; ++t) {
      x[size_t(t * s.in)] = x[size_t(t * s.in + 2)] = std::ldexp(1.0f, -63);
      for (int64_t i = 1; i < s.in; i += 2) x[size_t(t * s.in + i)] = std::ldexp(1.0f + float(t) / 16, -60);
    }
    const Tensor wt = w.tensor();
    std::vector<float> ref(size_t(s.n * s.out)), y(ref.size()), one(size_t(s.out));
    for (const KernelConfig& c : fma) {
      const std::string what = std::to_string(s.out) + "x" + std::to_string(s.in) + " n=" + std::to_string(s.n) +
                               " tile " + std::to_string(c.tile_tokens) + "x" + std::to_string(c.tile_rows) +
                               " blocking " + std::to_string(c.chunk_kib) + "/" + std::to_string(c.rowblock_kib);
      KernelConfig dot = c;
      dot.fma = false;
      std::fill(ref.begin(), ref.end(), NAN);
      std::fill(y.begin(), y.end(), NAN);
      matmul_with_config(Isa::Avx512, dot, ref.data(), x.data(), wt, s.n, pool2());
      matmul_with_config(Isa::Avx512, c, y.data(), x.data(), wt, s.n, pool2());
      EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4)) << what;
      EXPECT_EQ(y[0], std::ldexp(1.0f, -128)) << what << ": lanes summing to a denormal";
      for (int64_t t = 0; t < s.n; ++t) {
        std::fill(one.begin(), one.end(), NAN);
        matmul_with_config(Isa::Avx512, c, one.data(), x.data() + t * s.in, wt, 1, pool1());
        ASSERT_EQ(0, std::memcmp(one.data(), y.data() + t * s.out, one.size() * 4)) << what << " row " << t;
      }
    }
  }
}

TEST(Matmul, DispatchedMatchesBestIsa) {
  std::mt19937 rng(5);
  Weights w = make_weights(DType::BF16, 40, 300, rng);
  std::vector<float> x = random_vec(3 * 300, rng), a(3 * 40), b(3 * 40);
  matmul(a.data(), x.data(), w.tensor(), 3, pool2());
  matmul_isa(best_isa(), b.data(), x.data(), w.tensor(), 3, pool2());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
}

TEST(Matmul, UnsupportedDtypeIsError) {
  uint16_t w[4] = {};
  float x[2] = {1, 2}, y[2];
  for (Isa isa : cpu_isas())
    // (F8_E4M3 and MXFP4 have kernels: test_matmul_quant.cpp; MXFP4 here lacks scales.)
    for (DType dt : {DType::F16, DType::I8, DType::MXFP4})
      EXPECT_THROW(matmul_isa(isa, y, x, Tensor(dt, {2, 2}, w), 1, pool1()), Error)
          << dtype_name(dt);
  EXPECT_THROW(matmul(y, x, Tensor(DType::F16, {2, 2}, w), 1, pool1()), Error);
  float w1[4] = {};
  EXPECT_THROW(matmul(y, x, Tensor(DType::F32, {4}, w1), 1, pool1()), Error);  // not 2-D
}

TEST(Matmul, UnsupportedIsaIsError) {
  const std::vector<Isa> ok = cpu_isas();
  float y = 0, x = 1, w = 1;
  for (Isa isa : {Isa::Avx2, Isa::Avx512})
    if (std::find(ok.begin(), ok.end(), isa) == ok.end()) {
      EXPECT_THROW(matmul_isa(isa, &y, &x, Tensor(DType::F32, {1, 1}, &w), 1, pool1()), Error);
    }
  EXPECT_FALSE(ok.empty());
  EXPECT_EQ(ok.front(), Isa::Scalar);
}

}  // namespace
