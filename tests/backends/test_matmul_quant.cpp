// Quantized matmul kernels: MXFP4 (int8 activations x E2M1 weights) and block FP8,
// on every ISA path, against double references; the batch-invariance contract; and
// MXFP4's stronger property that every ISA gives the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "backends/cpu/matmul.h"
#include "backends/cpu/matmul_impl.h"
#include "backends/cpu_test_util.h"
#include "quant/dequantize.h"
#include "quant/mxfp4.h"

namespace {

using namespace mx;

ThreadPool& pool1() {
  static ThreadPool p(1);
  return p;
}
ThreadPool& pool2() {
  static ThreadPool p(2);
  return p;
}

using mxtest::cpu_isas;

// A kernel path: an ISA, or AVX2 with its non-VNNI integer dot (not what the
// dispatcher picks on a CPU with AVX-VNNI, so reached through run_kernels).
struct Path {
  std::string name;
  Isa isa;
  bool avx2_no_vnni = false;
};

std::vector<Path> mx_paths() {
  std::vector<Path> v;
  for (Isa isa : cpu_isas()) {
    v.push_back({isa_name(isa), isa});
    if (isa == Isa::Avx2) v.push_back({"avx2-maddubs", isa, true});
  }
  return v;
}

// c: a kernel config in place of the table's (matmul_with_config).
void run_path(const Path& p, float* y, const float* x, const Tensor& w, int64_t n, ThreadPool& pool,
              const KernelConfig* c = nullptr) {
  if (p.avx2_no_vnni) {
    static const matmul_detail::Kernels k = matmul_detail::avx2_kernels(false);
    matmul_detail::run_kernels(k, Isa::Avx2, y, x, w, n, pool, c);
  } else if (c) {
    matmul_with_config(p.isa, *c, y, x, w, n, pool);
  } else {
    matmul_isa(p.isa, y, x, w, n, pool);
  }
}

// --- MXFP4 ---------------------------------------------------------------------

struct MxWeights {
  int64_t out, in;
  std::vector<uint8_t> packed, scales;
  std::vector<float> deq;  // dequantize_row of the above
  Tensor tensor() {
    Tensor t(DType::MXFP4, {out, in}, packed.data());
    t.scales = scales.data();
    return t;
  }
};

// Quantized from Gaussian rows (realistic codes), some rows with raw random codes
// and scale bytes (every code, scales over a wide range).
MxWeights make_mx(int64_t out, int64_t in, std::mt19937& rng) {
  MxWeights w{out, in, std::vector<uint8_t>(size_t(out * in / 2)), std::vector<uint8_t>(size_t(out * in / 32)), {}};
  std::uniform_int_distribution<int> byte(0, 255), sc(100, 150);
  for (int64_t o = 0; o < out; ++o) {
    uint8_t* p = w.packed.data() + o * in / 2;
    uint8_t* s = w.scales.data() + o * in / 32;
    if (o % 3 == 2) {
      for (int64_t j = 0; j < in / 2; ++j) p[j] = uint8_t(byte(rng));
      for (int64_t b = 0; b < in / 32; ++b) s[b] = uint8_t(sc(rng));
    } else {
      std::vector<float> row = mxtest::randn(size_t(in), rng, 0.02f);
      mxfp4::quantize_row(row.data(), in, p, s, mxfp4::ScaleRule::Spec);
    }
  }
  w.deq.resize(size_t(out * in));
  for (int64_t o = 0; o < out; ++o)
    mxfp4::dequantize_row(w.packed.data() + o * in / 2, w.scales.data() + o * in / 32, in,
                          w.deq.data() + o * in);
  return w;
}

// The activation quantization the kernels document (matmul_impl.h), written out
// independently: per 32-block s = amax / 127, q = round_half_even(x * (127 / amax)).
void quantize_act_ref(const float* x, int64_t in, std::vector<double>& xq, std::vector<double>& amax) {
  xq.assign(size_t(in), 0.0);
  amax.assign(size_t(in / 32), 0.0);
  for (int64_t b = 0; b < in / 32; ++b) {
    float m = 0;
    for (int i = 0; i < 32; ++i) m = std::max(m, std::fabs(x[b * 32 + i]));
    amax[b] = m;
    if (m == 0) continue;
    const float inv = 127.0f / m, s = m / 127.0f;
    for (int i = 0; i < 32; ++i) {
      const float q = std::nearbyint(x[b * 32 + i] * inv);
      EXPECT_LE(std::fabs(q), 127.0f);
      xq[size_t(b * 32 + i)] = double(q) * double(s);
    }
  }
}

// Checks y (n x out) against (a) the double product of the dequantized weights and
// the int8-quantized activations: only float accumulation error remains; (b) the
// product with the unquantized activations, within the activation-quantization
// error bound sum_b (amax_b / 254) sum_i |w_i|.
void check_mx_reference(const std::vector<float>& y, const std::vector<float>& x, const MxWeights& w,
                        int64_t n, const std::string& what, double* max_rel = nullptr) {
  std::vector<double> xq, amax;
  for (int64_t t = 0; t < n; ++t) {
    quantize_act_ref(x.data() + t * w.in, w.in, xq, amax);
    for (int64_t o = 0; o < w.out; ++o) {
      const float* wr = w.deq.data() + o * w.in;
      double ref = 0, mag = 0, exact = 0, qbound = 0;
      for (int64_t b = 0; b < w.in / 32; ++b) {
        double blk = 0, wabs = 0;
        for (int i = 0; i < 32; ++i) {
          const int64_t k = b * 32 + i;
          blk += double(wr[k]) * xq[size_t(k)];
          exact += double(wr[k]) * double(x[size_t(t * w.in + k)]);
          wabs += std::fabs(double(wr[k]));
        }
        ref += blk;
        mag += std::fabs(blk);
        qbound += amax[size_t(b)] / 254.0 * 1.0001 * wabs;
      }
      const double got = y[size_t(t * w.out + o)];
      ASSERT_NEAR(got, ref, 2e-6 * mag + 1e-30) << what << " t=" << t << " o=" << o;
      ASSERT_NEAR(got, exact, qbound + 2e-6 * mag + 1e-30) << what << " t=" << t << " o=" << o << " (vs f32 x)";
      if (max_rel && mag > 0) *max_rel = std::max(*max_rel, std::fabs(got - ref) / mag);
    }
  }
}

// The configs to try for bit-identity: every tile shape, prefetch off and on (the
// first distance offered, whichever the default is).
// The ISA's candidate configs, with two of their prefetch distances: the first
// non-zero one and the largest (which reaches past the tests' short rows: AVX2's
// float GEMV then prefetches the next tile in address order, another code path).
std::vector<KernelConfig> configs(Isa isa, DType dt) {
  std::vector<KernelConfig> v = matmul_candidates(isa, dt);
  const auto on = std::find_if(v.begin(), v.end(), [](const KernelConfig& c) { return c.prefetch != 0; });
  const int pf = on == v.end() ? 0 : on->prefetch;
  int most = 0;
  for (const KernelConfig& c : v) most = std::max(most, c.prefetch);
  std::erase_if(v, [&](const KernelConfig& c) { return c.prefetch != 0 && c.prefetch != pf && c.prefetch != most; });
  return v;
}

std::string config_name(const KernelConfig& c) {
  return " config " + std::to_string(c.gemv_rows) + "/" + std::to_string(c.tile_tokens) + "x" +
         std::to_string(c.tile_rows) + " prefetch " + std::to_string(c.prefetch);
}

// Under config c, calls of n = 1 .. 4 tokens on x (the GEMV tiles: 1, 2 + 1 and 4 at a
// time) give the bits of the first n rows of ref, the batch's result.
void expect_gemv_tiles_match(const Path& p, const KernelConfig& c, const float* x, const Tensor& w, const float* ref,
                             const std::string& what) {
  const int64_t out = w.dim(0);
  std::vector<float> y(size_t(4 * out));
  for (int64_t n : {1, 2, 3, 4}) {
    run_path(p, y.data(), x, w, n, pool2(), &c);
    EXPECT_EQ(0, std::memcmp(y.data(), ref, size_t(n * out) * 4)) << what << ", " << n << " tokens";
  }
}

std::string label(const std::string& path, int64_t out, int64_t in, int64_t n) {
  return path + " out=" + std::to_string(out) + " in=" + std::to_string(in) + " n=" + std::to_string(n);
}

TEST(MatmulQuant, Mxfp4MatchesReferenceEveryPath) {
  std::mt19937 rng(42);
  struct Shape { int64_t out, in; };
  double max_rel = 0;
  // 1, 2, 11, 16, 17, 23, 28 and 152 blocks: partial and full 16-block groups, 8-block
  // halves, and rows ending in 1, 3, 4 and 7 blocks of a half (AVX2 loads only those).
  for (Shape s : {Shape{1, 32}, Shape{3, 64}, Shape{11, 352}, Shape{17, 512}, Shape{26, 544}, Shape{7, 736},
                  Shape{40, 896}, Shape{9, 4864}}) {
    MxWeights w = make_mx(s.out, s.in, rng);
    for (int64_t n : {1, 3, 17}) {
      std::vector<float> x = mxtest::randn(size_t(n * s.in), rng);
      std::vector<float> first;
      for (const Path& p : mx_paths()) {
        std::vector<float> y(size_t(n * s.out), NAN);
        run_path(p, y.data(), x.data(), w.tensor(), n, pool2());
        check_mx_reference(y, x, w, n, label(p.name, s.out, s.in, n), &max_rel);
        // The scheme is exact integer dots + the same IEEE float ops on every ISA.
        if (first.empty()) first = y;
        else EXPECT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * 4))
                 << label(p.name, s.out, s.in, n) << ": differs from the scalar path";
      }
    }
  }
  RecordProperty("max_rel_err_vs_int8_reference", std::to_string(max_rel));
  EXPECT_LT(max_rel, 1e-6);
}

// Relative RMS error of the int8 activation quantization on Gaussian data: small.
TEST(MatmulQuant, Mxfp4ActivationQuantizationErrorIsSmall) {
  std::mt19937 rng(7);
  MxWeights w = make_mx(64, 1024, rng);
  std::vector<float> x = mxtest::randn(4 * 1024, rng), y(4 * 64);
  matmul(y.data(), x.data(), w.tensor(), 4, pool2());
  double se = 0, ss = 0;
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t o = 0; o < 64; ++o) {
      double exact = 0;
      for (int64_t i = 0; i < 1024; ++i) exact += double(w.deq[size_t(o * 1024 + i)]) * x[size_t(t * 1024 + i)];
      se += (y[size_t(t * 64 + o)] - exact) * (y[size_t(t * 64 + o)] - exact);
      ss += exact * exact;
    }
  EXPECT_LT(std::sqrt(se / ss), 0.01);  // ~0.5% expected from int8 per-32 blocks
}

// Row t of an n-token matmul equals, bit for bit, the 1-token matmul of row t, a
// shorter batch containing it (5 and 8 tokens take the 4-token GEMV tiles),
// the same call on another thread count, and the same call under every kernel
// config (tile shape) the ISA implements, on every path (AVX2 without VNNI too).
// The GEMM tiles are 4 tokens: 9, 11 and 17 tokens leave 1, 3 and 1 after them.
TEST(MatmulQuant, Mxfp4BatchInvariantBitwise) {
  std::mt19937 rng(3);
  struct Shape { int64_t out, in, n; };
  for (const Path& p : mx_paths())
    for (Shape s : {Shape{50, 4864, 17}, Shape{200, 96, 5}, Shape{75, 544, 9}, Shape{50, 544, 11}}) {
      const std::string what = label(p.name, s.out, s.in, s.n);
      MxWeights w = make_mx(s.out, s.in, rng);
      const Tensor wt = w.tensor();
      std::vector<float> x = mxtest::randn(size_t(s.n * s.in), rng);
      std::vector<float> full2(size_t(s.n * s.out)), full1(full2.size()), one(size_t(s.out));
      run_path(p, full2.data(), x.data(), wt, s.n, pool2());
      run_path(p, full1.data(), x.data(), wt, s.n, pool1());
      EXPECT_EQ(0, std::memcmp(full1.data(), full2.data(), full1.size() * 4)) << what << " (threads)";
      for (int64_t t = 0; t < s.n; ++t) {
        run_path(p, one.data(), x.data() + t * s.in, wt, 1, pool2());
        EXPECT_EQ(0, std::memcmp(one.data(), full2.data() + t * s.out, one.size() * 4))
            << what << " row " << t << " (1 token vs batch)";
      }
      for (int64_t m : {int64_t(5), int64_t(8), s.n / 2 + 1}) {
        std::vector<float> x2 = mxtest::randn(size_t(m * s.in), rng), part(size_t(m * s.out));
        std::memcpy(x2.data(), x.data() + s.in, size_t(s.in) * 4);
        run_path(p, part.data(), x2.data(), wt, m, pool1());
        EXPECT_EQ(0, std::memcmp(part.data(), full2.data() + s.out, size_t(s.out) * 4))
            << what << " (row 1 in a batch of " << m << ")";
      }
      for (const KernelConfig& c : configs(p.isa, DType::MXFP4)) {
        std::vector<float> yc(full2.size());
        run_path(p, yc.data(), x.data(), wt, s.n, pool2(), &c);
        EXPECT_EQ(0, std::memcmp(yc.data(), full2.data(), yc.size() * 4)) << what << config_name(c);
        expect_gemv_tiles_match(p, c, x.data(), wt, full2.data(), what + config_name(c));
      }
    }
}

// A row's last 8-block half holding 1 .. 7 blocks (AVX2 loads only those, with its
// scale bytes read back from the row's last one), on both accumulators (an odd and
// an even number of whole halves before it), through every GEMV tile and prefetch
// distance: the scalar path's bits, on the matrix's last rows too.
TEST(MatmulQuant, Mxfp4GemvEveryRowTailUnderEveryConfig) {
  std::mt19937 rng(29);
  for (int64_t nb = 9; nb <= 23; ++nb) {
    if (nb % 8 == 0) continue;
    const int64_t in = 32 * nb, out = 19;  // 2 tiles of 8 rows (or 4 of 4) and 3 left over
    MxWeights w = make_mx(out, in, rng);
    const Tensor wt = w.tensor();
    std::vector<float> x = mxtest::randn(size_t(2 * in), rng), ref(size_t(2 * out)), y(ref.size());
    matmul_isa(Isa::Scalar, ref.data(), x.data(), wt, 2, pool1());
    for (Isa isa : cpu_isas()) {
      if (isa == Isa::Scalar) continue;
      for (const KernelConfig& c : configs(isa, DType::MXFP4))
        for (int64_t n : {1, 2}) {
          matmul_with_config(isa, c, y.data(), x.data(), wt, n, pool2());
          EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), size_t(n * out) * 4))
              << isa_name(isa) << " in=" << in << config_name(c) << ", " << n << " tokens";
        }
    }
  }
}

// Zero blocks, blocks holding inf or NaN, huge and tiny activations: every path
// (each ISA has its own quantizer) gives the same bits, NaN where a block is not finite.
TEST(MatmulQuant, Mxfp4ActivationEdgeCasesSameOnEveryPath) {
  std::mt19937 rng(21);
  MxWeights w = make_mx(19, 256, rng);
  const int64_t n = 12;  // more than 8: the GEMM tiles (tokens 6 .. 11 are plain)
  std::vector<float> x = mxtest::randn(size_t(n * 256), rng);
  for (int i = 0; i < 32; ++i) x[size_t(32 + i)] = 0.0f;            // token 0: a zero block
  x[size_t(256 + 40)] = INFINITY;                                   // token 1: inf
  x[size_t(512 + 200)] = NAN;                                       // token 2: NaN
  for (int i = 0; i < 256; ++i) x[size_t(768 + i)] *= 1e30f;         // token 3: huge
  for (int i = 0; i < 256; ++i) x[size_t(1024 + i)] *= 1e-30f;       // token 4: tiny
  for (int i = 0; i < 256; ++i) x[size_t(1280 + i)] = (i % 7) - 3.0f;  // token 5: exact ties
  std::vector<float> first;
  for (const Path& p : mx_paths()) {
    std::vector<float> y(size_t(n * 19));
    run_path(p, y.data(), x.data(), w.tensor(), n, pool1());
    for (int64_t o = 0; o < 19; ++o) {
      EXPECT_TRUE(std::isnan(y[size_t(19 + o)])) << p.name;
      EXPECT_TRUE(std::isnan(y[size_t(38 + o)])) << p.name;
      for (int64_t t : {0, 3, 4, 5}) EXPECT_TRUE(std::isfinite(y[size_t(t * 19 + o)])) << p.name << " t=" << t;
    }
    if (first.empty()) first = y;
    else EXPECT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * 4)) << p.name;
  }
  // The finite rows against the reference.
  for (int64_t t : {0, 3, 4, 5}) {
    std::vector<float> xt(x.begin() + t * 256, x.begin() + (t + 1) * 256), yt(first.begin() + t * 19, first.begin() + (t + 1) * 19);
    check_mx_reference(yt, xt, w, 1, "edge t=" + std::to_string(t));
  }
}

TEST(MatmulQuant, Mxfp4ShapeErrors) {
  std::vector<uint8_t> packed(64), scales(4);
  float x[64] = {}, y[4];
  for (Isa isa : cpu_isas()) {
    Tensor bad(DType::MXFP4, {2, 48}, packed.data());  // in % 32 != 0
    bad.scales = scales.data();
    EXPECT_THROW(matmul_isa(isa, y, x, bad, 1, pool1()), Error) << isa_name(isa);
    Tensor noscale(DType::MXFP4, {2, 32}, packed.data());
    EXPECT_THROW(matmul_isa(isa, y, x, noscale, 1, pool1()), Error) << isa_name(isa);
  }
}

// Scale byte 0xFF is NaN, all-zero activations give +0, tiny and huge scale bytes
// stay exact where representable.
TEST(MatmulQuant, Mxfp4SpecialValues) {
  const int64_t out = 4, in = 64;
  std::vector<uint8_t> packed(size_t(out * in / 2), 0x22), scales(size_t(out * in / 32), 127);  // all 1.0
  scales[2] = 0xFF;  // row 1, block 0
  scales[4] = 0;     // row 2: 2^-127 (flushed to 0: mx_scale) and 2^-126
  scales[5] = 1;
  Tensor w(DType::MXFP4, {out, in}, packed.data());
  w.scales = scales.data();
  // x = 127: amax / 127 = 1 and q = 127 exactly, so every value below is exact.
  std::vector<float> x(size_t(in), 127.0f), zero(size_t(in), 0.0f), y(out);
  for (const Path& p : mx_paths()) {
    run_path(p, y.data(), x.data(), w, 1, pool1());
    EXPECT_EQ(y[0], 64.0f * 127) << p.name;
    EXPECT_TRUE(std::isnan(y[1])) << p.name;
    EXPECT_EQ(y[2], 32 * 127 * 0x1p-126f) << p.name;
    EXPECT_EQ(y[3], 64.0f * 127) << p.name;
    run_path(p, y.data(), zero.data(), w, 1, pool1());
    EXPECT_EQ(y[0], 0.0f) << p.name;
    EXPECT_FALSE(std::signbit(y[0])) << p.name;
  }
}

// --- F8_E4M3 -------------------------------------------------------------------

struct Fp8Weights {
  int64_t out, in;
  std::vector<uint8_t> codes;
  std::vector<float> scales;  // empty: no scales
  Tensor tensor() {
    Tensor t(DType::F8_E4M3, {out, in}, codes.data());
    t.scales = scales.empty() ? nullptr : scales.data();
    return t;
  }
};

Fp8Weights make_fp8(int64_t out, int64_t in, bool with_scales, std::mt19937& rng) {
  Fp8Weights w{out, in, std::vector<uint8_t>(size_t(out * in)), {}};
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& c : w.codes) {
    do c = uint8_t(byte(rng));
    while ((c & 0x7f) == 0x7f);  // no NaN codes
  }
  if (with_scales) {
    std::uniform_real_distribution<float> u(1e-4f, 1e-2f);
    w.scales.resize(size_t((out + 127) / 128 * ((in + 127) / 128)));
    for (float& s : w.scales) s = u(rng);
    w.scales[0] = -w.scales[0];  // a negative block scale (nothing forbids one) flips the codes' signs
  }
  return w;
}

// The FP8 GEMV's two lookups of its table (matmul_impl.h, fp8_vbmi_lookup): 64 codes
// at a time with vpermt2b where this CPU has AVX512-VBMI, and 32 with vpermt2w (there
// too, switched off for the test, and everywhere else). Both are in the bf16-activation
// kernels (AVX512-BF16).
std::vector<bool> fp8_lookups() {
  if (cpu_features().avx512vbmi && matmul_bf16_activations(Isa::Avx512)) return {true, false};
  std::printf("[ matmul ] the FP8 GEMV's 64-code lookup not tested: it needs AVX512-VBMI and bf16 activations "
              "(AVX512-BF16, MXSERVE_BF16_ACTIVATIONS not 0); here: %s\n",
              cpu_features_string().c_str());
  return {false};
}
struct Fp8Lookup {  // the lookup for a scope, the previous one back after it
  bool was;
  explicit Fp8Lookup(bool vbmi) : was(matmul_detail::set_fp8_vbmi_lookup(vbmi)) {}
  ~Fp8Lookup() { matmul_detail::set_fp8_vbmi_lookup(was); }
};
const char* lookup_name(bool vbmi) { return vbmi ? " (vpermt2b lookup)" : ""; }

TEST(MatmulQuant, Fp8MatchesReferenceAndDequantizedF32) {
  std::mt19937 rng(11);
  struct Shape { int64_t out, in; };
  for (bool vbmi : fp8_lookups())
  for (bool with_scales : {true, false})
    for (Shape s : {Shape{130, 300}, Shape{257, 129}, Shape{3, 17}, Shape{64, 128}, Shape{20, 1000}}) {
      const Fp8Lookup lookup(vbmi);
      Fp8Weights w = make_fp8(s.out, s.in, with_scales, rng);
      OwnedTensor deq = dequantize_f32(w.tensor());
      const float* dq = deq.t.as<float>();
      for (int64_t n : {1, 5, 17}) {
        std::vector<float> x = mxtest::randn(size_t(n * s.in), rng);
        // With bf16 activations (matmul_bf16_activations), the kernels take the
        // dequantized weights rounded to bf16: the BF16 matmul of those.
        std::vector<uint16_t> dq_bf16(size_t(s.out * s.in));
        for (size_t i = 0; i < dq_bf16.size(); ++i) dq_bf16[i] = f32_to_bf16(dq[i]);
        const Tensor deq_bf16(DType::BF16, {s.out, s.in}, dq_bf16.data());
        auto bf16 = [](double v) { return double(bf16_to_f32(f32_to_bf16(float(v)))); };
        for (Isa isa : cpu_isas()) {
          const bool b16 = matmul_bf16_activations(isa);
          const std::string what = label(isa_name(isa), s.out, s.in, n) + (with_scales ? "" : " unscaled") +
                                   (b16 ? " bf16 activations" : "") + lookup_name(vbmi);
          std::vector<float> y(size_t(n * s.out), NAN), yf(y.size(), NAN);
          matmul_isa(isa, y.data(), x.data(), w.tensor(), n, pool2());
          // The weights are formed exactly as dequantize_f32 forms them, then the F32
          // scheme (or rounded to bf16, then the BF16 one).
          matmul_isa(isa, yf.data(), x.data(), b16 ? deq_bf16 : deq.t, n, pool2());
          EXPECT_EQ(0, std::memcmp(y.data(), yf.data(), y.size() * 4))
              << what << " vs " << (b16 ? "BF16" : "F32") << " of dequantized";
          for (int64_t t = 0; t < n; ++t)
            for (int64_t o = 0; o < s.out; ++o) {
              double ref = 0, mag = 0;
              for (int64_t i = 0; i < s.in; ++i) {
                // Independent of dequantize_f32: the code's value times its block scale.
                double wv = fp8e4m3_to_f32(w.codes[size_t(o * s.in + i)]);
                if (with_scales) wv *= w.scales[size_t((o / 128) * ((s.in + 127) / 128) + i / 128)];
                EXPECT_EQ(float(wv), dq[o * s.in + i]);
                double xv = x[size_t(t * s.in + i)];
                if (b16) wv = bf16(float(wv)), xv = bf16(xv);
                const double p = wv * xv;
                ref += p;
                mag += std::fabs(p);
              }
              ASSERT_NEAR(y[size_t(t * s.out + o)], ref, 3e-7 * std::sqrt(double(s.in) + 1) * mag + 1e-30)
                  << what << " t=" << t << " o=" << o;
            }
        }
      }
    }
}

TEST(MatmulQuant, Fp8BatchInvariantBitwise) {
  std::mt19937 rng(13);
  struct Shape { int64_t out, in, n; };
  for (bool vbmi : fp8_lookups())
  for (Isa isa : cpu_isas())
    // 4500: column blocks; 203: a partial last chunk.
    for (Shape s : {Shape{300, 1000, 17}, Shape{130, 200, 6}, Shape{40, 4500, 19}, Shape{24, 203, 7}}) {
      const Fp8Lookup lookup(vbmi);
      const std::string what = label(isa_name(isa), s.out, s.in, s.n) + lookup_name(vbmi);
      Fp8Weights w = make_fp8(s.out, s.in, true, rng);
      const Tensor wt = w.tensor();
      std::vector<float> x = mxtest::randn(size_t(s.n * s.in), rng);
      std::vector<float> full2(size_t(s.n * s.out)), full1(full2.size()), one(size_t(s.out));
      matmul_isa(isa, full2.data(), x.data(), wt, s.n, pool2());
      matmul_isa(isa, full1.data(), x.data(), wt, s.n, pool1());
      EXPECT_EQ(0, std::memcmp(full1.data(), full2.data(), full1.size() * 4)) << what << " (threads)";
      for (int64_t t = 0; t < s.n; ++t) {
        matmul_isa(isa, one.data(), x.data() + t * s.in, wt, 1, pool2());
        EXPECT_EQ(0, std::memcmp(one.data(), full2.data() + t * s.out, one.size() * 4))
            << what << " row " << t << " (1 token vs batch)";
      }
      for (const KernelConfig& c : configs(isa, DType::F8_E4M3)) {
        std::vector<float> yc(full2.size());
        matmul_with_config(isa, c, yc.data(), x.data(), wt, s.n, pool2());
        EXPECT_EQ(0, std::memcmp(yc.data(), full2.data(), yc.size() * 4)) << what << config_name(c);
        expect_gemv_tiles_match({isa_name(isa), isa}, c, x.data(), wt, full2.data(), what + config_name(c));
      }
    }
}

TEST(MatmulQuant, Fp8NanCodesPropagate) {
  // Rows of 40 (a 32-column chunk and a tail) and of 80 (a 64-code lookup first).
  for (int64_t in : {40, 80}) {
    std::vector<uint8_t> codes(size_t(2 * in), 0x38);  // 1.0
    codes[size_t(in + 7)] = 0xFF;                       // row 1: NaN
    std::vector<float> x(size_t(in), 1.0f), y(2);
    for (bool vbmi : fp8_lookups()) {
      const Fp8Lookup lookup(vbmi);
      for (Isa isa : cpu_isas()) {
        matmul_isa(isa, y.data(), x.data(), Tensor(DType::F8_E4M3, {2, in}, codes.data()), 1, pool1());
        EXPECT_EQ(y[0], float(in)) << isa_name(isa) << lookup_name(vbmi);
        EXPECT_TRUE(std::isnan(y[1])) << isa_name(isa) << lookup_name(vbmi);
      }
    }
  }
}

// F32 / BF16 under every config give the same bits too (tiles only group outputs),
// in the GEMM (9 tokens) and in the GEMV tiles (1 to 4 tokens from row 1), prefetching or not.
TEST(MatmulQuant, FloatConfigsBitwiseIdentical) {
  std::mt19937 rng(17);
  std::vector<float> w = mxtest::randn(size_t(77 * 301), rng), x = mxtest::randn(size_t(9 * 301), rng);
  std::vector<uint16_t> wb(w.size());
  for (size_t i = 0; i < w.size(); ++i) wb[i] = f32_to_bf16(w[i]);
  for (Isa isa : cpu_isas())
    for (DType dt : {DType::F32, DType::BF16}) {
      const Tensor t(dt, {77, 301}, dt == DType::F32 ? static_cast<void*>(w.data()) : wb.data());
      std::vector<float> ref(9 * 77), y(9 * 77);
      matmul_isa(isa, ref.data(), x.data(), t, 9, pool2());
      for (const KernelConfig& c : configs(isa, dt)) {
        const std::string what = std::string(isa_name(isa)) + " " + dtype_name(dt) + config_name(c);
        matmul_with_config(isa, c, y.data(), x.data(), t, 9, pool2());
        EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4)) << what;
        expect_gemv_tiles_match({isa_name(isa), isa}, c, x.data() + 301, t, ref.data() + 77, what);
      }
    }
}

// matmul_many (q, k, v in one parallel region): each output is bitwise what matmul
// writes for its weight alone, for every dtype, token count and thread count, and
// weights that cannot go together (mixed dtypes) still give each its own product.
TEST(MatmulMany, EachOutputIsItsMatmulBitwise) {
  std::mt19937 rng(23);
  const int64_t in = 160;
  const int64_t outs[] = {72, 16, 40};
  std::vector<float> wf[3];
  std::vector<uint16_t> wb[3];
  std::vector<MxWeights> wm;
  std::vector<Fp8Weights> w8;
  for (int i = 0; i < 3; ++i) {
    wf[i] = mxtest::randn(size_t(outs[i] * in), rng);
    for (float v : wf[i]) wb[i].push_back(f32_to_bf16(v));
    wm.push_back(make_mx(outs[i], in, rng));
    w8.push_back(make_fp8(outs[i], in, true, rng));
  }
  auto tensors = [&](DType dt, int i) {
    if (dt == DType::F32) return Tensor(dt, {outs[i], in}, wf[i].data());
    if (dt == DType::BF16) return Tensor(dt, {outs[i], in}, wb[i].data());
    if (dt == DType::MXFP4) return wm[size_t(i)].tensor();
    return w8[size_t(i)].tensor();
  };
  const std::vector<std::vector<DType>> sets = {{DType::F32, DType::F32, DType::F32},
                                                {DType::BF16, DType::BF16, DType::BF16},
                                                {DType::MXFP4, DType::MXFP4, DType::MXFP4},
                                                {DType::F8_E4M3, DType::F8_E4M3, DType::F8_E4M3},
                                                {DType::BF16, DType::MXFP4, DType::F32}};
  for (const auto& set : sets)
    for (int64_t n : {1, 3, 40})
      for (ThreadPool* pool : {&pool1(), &pool2()}) {
        const std::vector<float> x = mxtest::randn(size_t(n * in), rng);
        Tensor t[3];
        const Tensor* tp[3];
        std::vector<float> y[3], ref[3];
        float* ys[3];
        for (int i = 0; i < 3; ++i) {
          t[i] = tensors(set[size_t(i)], i), tp[i] = &t[i];
          y[i].assign(size_t(n * outs[i]), -1.0f), ref[i].assign(size_t(n * outs[i]), -2.0f);
          ys[i] = y[i].data();
          matmul(ref[i].data(), x.data(), t[i], n, *pool);
        }
        matmul_many(ys, x.data(), tp, 3, n, *pool);
        for (int i = 0; i < 3; ++i)
          EXPECT_EQ(0, std::memcmp(y[i].data(), ref[i].data(), y[i].size() * 4))
              << dtype_name(set[size_t(i)]) << " weight " << i << ", " << n << " tokens, " << pool->size()
              << " threads";
      }
}

// A weight with no rows in the middle computes nothing and shifts nobody's rows;
// weights of different widths go one by one (each reads x with its own width). 5
// tokens stream through the GEMV tiles, 12 run the GEMM (on a CPU with FMA tiles, the
// activations they widen pass over the empty weight to the last).
TEST(MatmulMany, EmptyAndMismatchedWeights) {
  std::mt19937 rng(29);
  for (const int64_t n : {int64_t(5), int64_t(12)}) {
    const std::vector<float> x = mxtest::randn(size_t(n * 256), rng);
    std::vector<uint16_t> wb = [&] {
      std::vector<uint16_t> v;
      for (float f : mxtest::randn(size_t(300 * 256), rng)) v.push_back(f32_to_bf16(f));
      return v;
    }();
    for (int64_t in2 : {int64_t(256), int64_t(96)}) {
      const Tensor t[3] = {Tensor(DType::BF16, {200, 256}, wb.data()), Tensor(DType::BF16, {0, 256}, wb.data()),
                           Tensor(DType::BF16, {100, in2}, wb.data() + 200 * 256)};
      const Tensor* tp[3] = {&t[0], &t[1], &t[2]};
      std::vector<float> y0(size_t(n * 200)), y2(size_t(n * 100)), r0(y0.size()), r2(y2.size());
      float* ys[3] = {y0.data(), nullptr, y2.data()};
      matmul_many(ys, x.data(), tp, 3, n, pool2());
      matmul(r0.data(), x.data(), t[0], n, pool2());
      matmul(r2.data(), x.data(), t[2], n, pool2());
      EXPECT_EQ(0, std::memcmp(y0.data(), r0.data(), y0.size() * 4)) << "in " << in2 << ", " << n << " tokens";
      EXPECT_EQ(0, std::memcmp(y2.data(), r2.data(), y2.size() * 4)) << "in " << in2 << ", " << n << " tokens";
    }
  }
}

}  // namespace
