// Backend ops (backends/backend.h): the CPU backend against plain references,
// then every GPU backend compiled in against the CPU backend on the same
// inputs (skipped when no GPU device is present, as in CI).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "f32_activations.h"
#include "backends/backend.h"
#include "backends/cpu_test_util.h"
#include "backends/cpu/matmul.h"
#include "backends/cpu/ops.h"
#include "backends/gpu_test_util.h"
#include "backends/route_impl.h"
#include "quant/mxfp4.h"

namespace mx {
namespace {

// A weight stack in host memory: the bytes a backend gets and their f32 values.
struct HostWeight {
  DType dtype;
  int64_t out, in;
  int experts;
  std::vector<uint8_t> data, scales;
  std::vector<float> ref;  // [experts, out, in] dequantized
};

HostWeight make_weight(DType dt, int64_t out, int64_t in, int experts, std::mt19937& rng) {
  HostWeight w{dt, out, in, experts, {}, {}, {}};
  std::normal_distribution<float> nd(0.0f, 0.5f);
  const int64_t n = out * in;
  w.ref.resize(size_t(experts) * n);
  for (int e = 0; e < experts; ++e) {
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng);
    float* r = w.ref.data() + size_t(e) * n;
    if (dt == DType::F32) {
      const size_t o = w.data.size();
      w.data.resize(o + n * 4);
      std::memcpy(w.data.data() + o, v.data(), n * 4);
      std::copy(v.begin(), v.end(), r);
    } else if (dt == DType::BF16) {
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t b = f32_to_bf16(v[i]);
        w.data.push_back(uint8_t(b & 255)), w.data.push_back(uint8_t(b >> 8));
        r[i] = bf16_to_f32(b);
      }
    } else if (dt == DType::MXFP4) {
      const size_t od = w.data.size(), os = w.scales.size();
      w.data.resize(od + n / 2), w.scales.resize(os + n / 32);
      for (int64_t o = 0; o < out; ++o) {
        uint8_t* p = w.data.data() + od + o * in / 2;
        uint8_t* s = w.scales.data() + os + o * in / 32;
        mxfp4::quantize_row(v.data() + o * in, in, p, s, mxfp4::ScaleRule::Spec);
        mxfp4::dequantize_row(p, s, in, r + o * in);
      }
    } else {  // F8_E4M3 with 128 x 128 block scales
      const int64_t sr = (out + 127) / 128, sc = (in + 127) / 128;
      std::vector<float> scale(sr * sc);
      for (float& s : scale) s = std::ldexp(1.0f, int(rng() % 5) - 6);
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) {
          const float s = scale[(o / 128) * sc + i / 128];
          const uint8_t c = f32_to_fp8e4m3(v[o * in + i] / s);
          w.data.push_back(c);
          r[o * in + i] = fp8e4m3_to_f32(c) * s;
        }
      const size_t os = w.scales.size();
      w.scales.resize(os + scale.size() * 4);
      std::memcpy(w.scales.data() + os, scale.data(), scale.size() * 4);
    }
  }
  return w;
}

// Inputs and outputs in one backend's memory.
class Dev {
 public:
  explicit Dev(Backend& b) : b_(b) {}
  template <class T>
  T* put(const std::vector<T>& v) {
    bufs_.emplace_back(b_, std::max<size_t>(1, v.size()) * sizeof(T));
    if (!v.empty()) b_.upload(bufs_.back().get(), v.data(), v.size() * sizeof(T));
    return bufs_.back().template get<T>();
  }
  template <class T>
  T* zeros(size_t n) { return put(std::vector<T>(n)); }
  template <class T>
  std::vector<T> get(const T* p, size_t n) {
    std::vector<T> v(n);
    b_.synchronize();
    b_.download(v.data(), p, n * sizeof(T));
    return v;
  }
  DevWeight weight(const HostWeight& h) {
    DevWeight w;
    w.dtype = h.dtype, w.out = h.out, w.in = h.in, w.experts = h.experts;
    w.data = put(h.data);
    if (!h.scales.empty()) w.scales = put(h.scales);
    if (h.dtype == DType::F8_E4M3) w.scale_cols = (h.in + 127) / 128;
    return w;
  }
  Backend& b() { return b_; }

 private:
  Backend& b_;
  std::vector<DevBuffer> bufs_;
};

using mxtest::randn;

std::vector<float> as_float(const std::vector<int32_t>& v) { return {v.begin(), v.end()}; }

// Runs every op on fixed inputs (seeded) and returns each op's outputs.
using Results = std::map<std::string, std::vector<float>>;

Results run_ops(Backend& b) {
  std::mt19937 rng(1234);
  Dev d(b);
  Results r;
  // Linear layers in every weight format, decode (T = 1, 3) and prefill (T = 37) sizes;
  // in = 200 is not a multiple of 8 (the scalar lane path).
  for (DType dt : {DType::F32, DType::BF16, DType::MXFP4, DType::F8_E4M3})
    for (int64_t in : {256, 200})
      for (int64_t T : {1, 3, 37}) {
        if (dt == DType::MXFP4 && in % 32) continue;
        const HostWeight hw = make_weight(dt, 160, in, 1, rng);
        const std::vector<float> x = randn(T * in, rng);
        float* y = d.zeros<float>(T * 160);
        b.matmul(y, d.put(x), d.weight(hw), T);
        const std::string name = std::string("matmul ") + dtype_name(dt) + " in" + std::to_string(in) + " T" +
                                 std::to_string(T);
        r[name] = d.get(y, T * 160);
        if (dt == DType::MXFP4) {  // the exact product with the dequantized weights (f32 activations)
          std::vector<float> ref(T * 160, 0.0f);
          for (int64_t t = 0; t < T; ++t)
            for (int64_t o = 0; o < 160; ++o) {
              double s = 0;
              for (int64_t i = 0; i < in; ++i) s += double(x[t * in + i]) * hw.ref[o * in + i];
              ref[t * 160 + o] = float(s);
            }
          r[name + " f32 ref"] = ref;
        }
      }
  {  // row-wise and element-wise ops
    const int rows = 5, dim = 96;
    const std::vector<float> x = randn(rows * dim, rng), w = randn(dim, rng), u = randn(rows * dim, rng);
    float* dx = d.put(x);
    float* y = d.zeros<float>(rows * dim);
    b.rmsnorm(y, dx, d.put(w), rows, dim, 1e-6f);
    r["rmsnorm"] = d.get(y, rows * dim);
    b.silu_mul(y, dx, d.put(u), rows * dim);
    r["silu_mul"] = d.get(y, rows * dim);
    b.add(y, dx, rows * dim);
    r["add"] = d.get(y, rows * dim);
    b.add_bias(y, d.put(w), rows, dim);
    r["add_bias"] = d.get(y, rows * dim);
    const HostWeight table = make_weight(DType::BF16, 50, dim, 1, rng);
    const std::vector<int32_t> ids{3, 0, 49, 3, 17};
    b.embed(y, d.weight(table), d.put(ids), rows);
    r["embed"] = d.get(y, rows * dim);
  }
  {  // RoPE, both pairings, partial rotary
    const int T = 4, heads = 3, hd = 32;
    std::vector<float> inv(8);
    for (int i = 0; i < 8; ++i) inv[i] = std::pow(10000.0f, -float(i) / 8);
    for (bool inter : {false, true}) {
      const std::vector<float> x = randn(T * heads * hd, rng);
      float* dx = d.put(x);
      RopeArgs ra{16, inter, 1.25f, d.put(inv)};
      b.rope(dx, d.put(std::vector<int32_t>{0, 1, 700, 123456}), T, heads, heads * hd, hd, ra);
      r[inter ? "rope interleaved" : "rope rotate_half"] = d.get(dx, x.size());
    }
  }
  {  // paged attention: 2 sequences (lengths 45 and 70), GQA 8 heads over 2, block size 16
    for (int hd : {64, 128}) {
      const int H = 8, G = 2, bs = 16, kw = G * hd, nblocks = 12, maxb = 6;
      PagedKV kv{nullptr, nullptr, kw, kw, bs};
      const std::vector<float> kc = randn(size_t(nblocks) * bs * kw, rng), vc = randn(size_t(nblocks) * bs * kw, rng);
      kv.k = d.put(kc), kv.v = d.put(vc);
      // Scattered, non-contiguous block tables.
      const std::vector<int32_t> tables{7, 2, 9, 0, 0, 0, 1, 11, 4, 5, 8, 0};
      AttnArgs a{H, G, hd, 1.0f / std::sqrt(float(hd))};
      const std::vector<int32_t> seq{0, 1, 1}, pos{44, 69, 3};
      const std::vector<float> q = randn(3 * H * hd, rng);
      float* out = d.zeros<float>(3 * H * hd);
      b.paged_attention(out, d.put(q), H * hd, kv, a, d.put(tables), maxb, d.put(seq), d.put(pos), 3);
      r["paged_attention hd" + std::to_string(hd)] = d.get(out, 3 * H * hd);
      // Prefill of sequence 1's positions 20..69 (a cached prefix of 20 before them).
      const std::vector<float> qp = randn(50 * H * hd, rng);
      float* outp = d.zeros<float>(50 * H * hd);
      b.prefill_attention(outp, d.put(qp), H * hd, kv, a, d.put(tables) + maxb, 20, 50);
      r["prefill_attention hd" + std::to_string(hd)] = d.get(outp, 50 * H * hd);
    }
    // kv_write into scattered slots
    const int kw = 8, T = 3;
    PagedKV kv{d.zeros<float>(64 * kw), d.zeros<float>(64 * kw), kw, kw, 16};
    const std::vector<float> k = randn(T * 12, rng), v = randn(T * 12, rng);
    b.kv_write(kv, d.put(k), 12, d.put(v), 12, d.put(std::vector<int32_t>{5, 63, 17}), T);
    std::vector<float> both = d.get(static_cast<float*>(kv.k), 64 * kw), vv = d.get(static_cast<float*>(kv.v), 64 * kw);
    both.insert(both.end(), vv.begin(), vv.end());
    r["kv_write"] = both;
  }
  // bf16 and fp8 caches: kv_write rounds (the same bits on every backend), attention reads them back.
  for (DType dt : {DType::BF16, DType::F8_E4M3}) {
    const int H = 4, G = 2, hd = 32, bs = 16, kw = G * hd, slots = 64;
    const size_t es = dtype_bits(dt) / 8;
    PagedKV kv{d.zeros<uint8_t>(slots * kw * es), d.zeros<uint8_t>(slots * kw * es), kw, kw, bs, dt};
    std::vector<int32_t> slot(40);
    for (int i = 0; i < 40; ++i) slot[i] = (i * 37 + 5) % slots;  // 40 positions scattered over 4 blocks
    const std::vector<float> k = randn(40 * kw, rng), v = randn(40 * kw, rng);
    b.kv_write(kv, d.put(k), kw, d.put(v), kw, d.put(slot), 40);
    const std::vector<uint8_t> kb = d.get(static_cast<uint8_t*>(kv.k), slots * kw * es);
    std::vector<float> kf(slots * kw);
    for (int i = 0; i < slots * kw; ++i) kf[i] = kv_load(kb.data(), dt, i);
    const std::string tag = std::string(" ") + dtype_name(dt);
    r["kv_write" + tag] = kf;
    const std::vector<int32_t> tables{0, 1, 2, 3};  // position p at slot p (blocks 0..3 in order)
    const std::vector<float> q = randn(2 * H * hd, rng);
    float* out = d.zeros<float>(2 * H * hd);
    b.paged_attention(out, d.put(q), H * hd, kv, AttnArgs{H, G, hd, 0.2f}, d.put(tables), 4,
                      d.put(std::vector<int32_t>{0, 0}), d.put(std::vector<int32_t>{63, 20}), 2);
    r["paged_attention" + tag] = d.get(out, 2 * H * hd);
  }
  // --load-format dummy's weights: the same bits on every backend.
  for (DType dt : {DType::F32, DType::BF16, DType::F8_E4M3, DType::U8}) {
    const size_t n = 1000, es = dtype_bits(dt) / 8;
    uint8_t* p = d.zeros<uint8_t>(n * es);
    const bool bytes = dt == DType::U8;
    b.fill_uniform(p, dt, n, bytes ? 100.0f : -0.5f, bytes ? 140.0f : 0.5f, 77);
    const std::vector<uint8_t> raw = d.get(p, n * es);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = bytes ? float(raw[i]) : load_as_f32(raw.data(), dt, int64_t(i));
    r[std::string("fill ") + dtype_name(dt)] = v;
  }
  {  // MoE: routing (both router kinds) and the grouped expert FFN
    const int T = 6, E = 16, k = 4, D = 64, Hd = 96;
    const std::vector<float> logits = randn(T * E, rng, 2.0f), bias = randn(E, rng, 0.1f);
    int32_t* ids = d.zeros<int32_t>(T * k);
    float* w = d.zeros<float>(T * k);
    RouteArgs sig{E, k, true, 4, 2, true, 2.5f, d.put(bias)};
    b.moe_route(ids, w, d.put(logits), T, sig);
    r["route sigmoid ids"] = as_float(d.get(ids, T * k));
    r["route sigmoid weights"] = d.get(w, T * k);
    RouteArgs soft{E, k, false, 1, 1, false, 1.0f, nullptr};
    b.moe_route(ids, w, d.put(logits), T, soft);
    r["route softmax ids"] = as_float(d.get(ids, T * k));
    r["route softmax weights"] = d.get(w, T * k);
    for (DType dt : {DType::BF16, DType::MXFP4}) {
      const HostWeight g = make_weight(dt, Hd, D, E, rng), u = make_weight(dt, Hd, D, E, rng),
                       dn = make_weight(dt, D, Hd, E, rng);
      const std::vector<float> x = randn(T * D, rng);
      float* out = d.zeros<float>(T * D);
      b.moe_ffn(out, d.put(x), ids, w, T, k, ExpertWeights::stacked(d.weight(g), d.weight(u), d.weight(dn)));
      r[std::string("moe_ffn ") + dtype_name(dt)] = d.get(out, T * D);
    }
  }
  {  // argmax and Gumbel sampling
    const int rows = 64, vocab = 50;
    const std::vector<float> l = randn(rows * vocab, rng, 2.0f);
    float* dl = d.put(l);
    int32_t* ids = d.zeros<int32_t>(rows);
    b.argmax(ids, dl, rows, vocab);
    r["argmax"] = as_float(d.get(ids, rows));
    b.sample(ids, dl, rows, vocab, 0.8f, 42);
    r["sample"] = as_float(d.get(ids, rows));
  }
  return r;
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

TEST(Backend, CpuBackendMatchesReferences) {
  auto b = make_backend("cpu");
  EXPECT_NE(b->name().find("cpu"), std::string::npos);
  std::mt19937 rng(7);
  Dev d(*b);
  // matmul in every format against the dequantized f32 weights (MXFP4's CPU
  // path quantizes activations to int8: a looser bound).
  for (DType dt : {DType::F32, DType::BF16, DType::MXFP4, DType::F8_E4M3}) {
    const int64_t out = 48, in = 128, T = 5;
    const HostWeight hw = make_weight(dt, out, in, 1, rng);
    const std::vector<float> x = randn(T * in, rng);
    float* y = d.zeros<float>(T * out);
    b->matmul(y, d.put(x), d.weight(hw), T);
    const std::vector<float> got = d.get(y, T * out);
    // BF16 and FP8 weights may multiply activations rounded to bf16, FP8 ones
    // then rounded to bf16 too (backends/cpu/matmul.h).
    const bool round = (dt == DType::BF16 || dt == DType::F8_E4M3) && matmul_bf16_activations(best_isa());
    auto r16 = [&](float v) { return round ? bf16_to_f32(f32_to_bf16(v)) : v; };
    double worst = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t o = 0; o < out; ++o) {
        double ref = 0;
        for (int64_t i = 0; i < in; ++i) ref += double(r16(hw.ref[o * in + i])) * r16(x[t * in + i]);
        worst = std::max(worst, std::fabs(ref - got[t * out + o]));
      }
    EXPECT_LT(worst, dt == DType::MXFP4 ? 0.3 : 1e-3) << dtype_name(dt);
  }
  // Attention against a direct softmax over a contiguous copy of the cache.
  const int H = 4, G = 2, hd = 16, bs = 4, n = 11;
  PagedKV kv{nullptr, nullptr, G * hd, G * hd, bs};
  const std::vector<float> kc = randn(4 * bs * G * hd, rng), vc = randn(4 * bs * G * hd, rng);
  kv.k = d.put(kc), kv.v = d.put(vc);
  const std::vector<int32_t> table{2, 0, 3};
  const std::vector<float> q = randn(H * hd, rng);
  float* out = d.zeros<float>(H * hd);
  AttnArgs a{H, G, hd, 0.25f};
  b->paged_attention(out, d.put(q), H * hd, kv, a, d.put(table), 3, d.put(std::vector<int32_t>{0}),
                     d.put(std::vector<int32_t>{n - 1}), 1);
  const std::vector<float> got = d.get(out, H * hd);
  for (int h = 0; h < H; ++h) {
    const int g = h / (H / G);
    std::vector<double> s(n);
    double mx = -1e30, sum = 0;
    for (int p = 0; p < n; ++p) {
      const size_t slot = size_t(table[p / bs]) * bs + p % bs;
      double dot = 0;
      for (int i = 0; i < hd; ++i) dot += q[h * hd + i] * kc[slot * G * hd + g * hd + i];
      s[p] = 0.25 * dot, mx = std::max(mx, s[p]);
    }
    for (double& v : s) sum += (v = std::exp(v - mx));
    for (int i = 0; i < hd; ++i) {
      double o = 0;
      for (int p = 0; p < n; ++p) o += s[p] / sum * vc[(size_t(table[p / bs]) * bs + p % bs) * G * hd + g * hd + i];
      EXPECT_NEAR(got[h * hd + i], o, 1e-5);
    }
  }
  // The whole op set runs, prefill attention equals decode attention row by row.
  const Results r = run_ops(*b);
  // A bf16 / fp8 cache holds the rounded values (within half an ulp: 2^-9 and
  // 2^-4 relative); a dummy fill stays in its range and is not constant.
  for (const char* dt : {"BF16", "F8_E4M3"}) {
    const std::vector<float>& kf = r.at(std::string("kv_write ") + dt);
    const std::vector<float>& o = r.at(std::string("paged_attention ") + dt);
    EXPECT_GT(max_abs(kf), 1.0f) << dt;
    EXPECT_GT(max_abs(o), 0.0f) << dt;
  }
  for (const char* dt : {"F32", "BF16", "F8_E4M3", "U8"}) {
    const std::vector<float>& v = r.at(std::string("fill ") + dt);
    const bool bytes = std::string(dt) == "U8";
    const float lo = bytes ? 100 : -0.5f, hi = bytes ? 140 : 0.5f;
    float mn = 1e9f, mx = -1e9f;
    double mean = 0;
    for (float x : v) mn = std::min(mn, x), mx = std::max(mx, x), mean += x / v.size();
    EXPECT_GE(mn, lo) << dt;
    EXPECT_LE(mx, hi) << dt;
    EXPECT_GT(mx - mn, 0.8f * (hi - lo)) << dt;
    EXPECT_NEAR(mean, (lo + hi) / 2, 0.05 * (hi - lo)) << dt;
  }
  const std::vector<float>& pre = r.at("prefill_attention hd64");
  EXPECT_EQ(pre.size(), 50u * 8 * 64);
  // Sampling is an exact draw: at a tiny temperature it is the argmax.
  std::vector<float> l = randn(8 * 30, rng);
  int32_t* ids = d.zeros<int32_t>(8);
  b->sample(ids, d.put(l), 8, 30, 1e-4f, 9);
  const std::vector<int32_t> s = d.get(ids, 8);
  b->argmax(ids, d.put(l), 8, 30);
  EXPECT_EQ(s, d.get(ids, 8));
}

TEST(Backend, PrefillAttentionEqualsDecodeAttention) {
  // The flash path and the decode path compute the same thing: check it on the
  // CPU backend so the GPU comparison below covers both kernels.
  auto b = make_backend("cpu");
  std::mt19937 rng(3);
  Dev d(*b);
  const int H = 4, G = 1, hd = 32, bs = 8, n = 30;
  PagedKV kv{nullptr, nullptr, G * hd, G * hd, bs};
  kv.k = d.put(randn(4 * bs * hd, rng)), kv.v = d.put(randn(4 * bs * hd, rng));
  const std::vector<int32_t> table{3, 1, 0, 2};
  const std::vector<float> q = randn(n * H * hd, rng);
  AttnArgs a{H, G, hd, 0.2f};
  float* o1 = d.zeros<float>(n * H * hd);
  float* o2 = d.zeros<float>(n * H * hd);
  b->prefill_attention(o1, d.put(q), H * hd, kv, a, d.put(table), 0, n);
  std::vector<int32_t> pos(n), seq(n, 0);
  for (int i = 0; i < n; ++i) pos[i] = i;
  b->paged_attention(o2, d.put(q), H * hd, kv, a, d.put(table), 4, d.put(seq), d.put(pos), n);
  EXPECT_EQ(d.get(o1, n * H * hd), d.get(o2, n * H * hd));
}

TEST(Backend, Bf16AndFp8KvCachesHoldTheRoundedValues) {
  // kv_write into a bf16 / fp8 cache rounds each value once (round to nearest
  // even); attention over it equals attention over an f32 cache holding those
  // rounded values, bit for bit, for GQA and MLA's values-in-K layout. With f32
  // products on both: on AVX512-BF16 a bf16 / fp8 cache otherwise gets bf16
  // products (backends/cpu/attention.h; test_attention.cpp checks those).
  const mxtest::F32Activations f32_products;
  auto b = make_backend("cpu");
  std::mt19937 rng(11);
  Dev d(*b);
  const int H = 4, G = 2, hd = 32, bs = 8, n = 29, kw = G * hd;
  const std::vector<float> k = randn(n * kw, rng, 3.0f), v = randn(n * kw, rng);
  std::vector<int32_t> slots(n);
  for (int i = 0; i < n; ++i) slots[i] = i;
  const std::vector<int32_t> table{0, 1, 2, 3};
  const std::vector<float> q = randn(H * hd, rng);
  for (DType dt : {DType::BF16, DType::F8_E4M3}) {
    const size_t es = dtype_bits(dt) / 8;
    PagedKV kv{d.zeros<uint8_t>(32 * kw * es), d.zeros<uint8_t>(32 * kw * es), kw, kw, bs, dt};
    b->kv_write(kv, d.put(k), kw, d.put(v), kw, d.put(slots), n);
    std::vector<float> kr(32 * kw, 0.0f), vr(32 * kw, 0.0f);
    for (int i = 0; i < n * kw; ++i) {
      kr[i] = dt == DType::BF16 ? bf16_to_f32(f32_to_bf16(k[i])) : fp8e4m3_to_f32(f32_to_fp8e4m3(k[i]));
      vr[i] = dt == DType::BF16 ? bf16_to_f32(f32_to_bf16(v[i])) : fp8e4m3_to_f32(f32_to_fp8e4m3(v[i]));
      EXPECT_LE(std::fabs(kr[i] - k[i]), std::fabs(k[i]) * (dt == DType::BF16 ? 0x1p-8f : 0x1p-3f) + 1e-3f);
    }
    PagedKV ref{d.put(kr), d.put(vr), kw, kw, bs};
    for (bool mla : {false, true}) {
      AttnArgs a{H, G, hd, 0.2f};
      if (mla) a.v_dim = hd / 2, a.values_in_k = true;
      float* o1 = d.zeros<float>(H * hd);
      float* o2 = d.zeros<float>(H * hd);
      const int32_t* tb = d.put(table);
      b->paged_attention(o1, d.put(q), H * hd, kv, a, tb, 4, d.put(std::vector<int32_t>{0}),
                         d.put(std::vector<int32_t>{n - 1}), 1);
      b->paged_attention(o2, d.put(q), H * hd, ref, a, tb, 4, d.put(std::vector<int32_t>{0}),
                         d.put(std::vector<int32_t>{n - 1}), 1);
      EXPECT_EQ(d.get(o1, H * a.vd()), d.get(o2, H * a.vd())) << dtype_name(dt) << (mla ? " mla" : " gqa");
    }
  }
}

TEST(Backend, SamplingFollowsTheDistribution) {
  // 4000 rows of the same logits: the sampled frequencies match softmax(l / T)
  // (chi-square, 5 categories, 4 dof: 18.5 is the 0.1% point).
  auto b = make_backend("cpu");
  Dev d(*b);
  const int rows = 4000, V = 5;
  const float temp = 0.7f;
  const std::vector<float> base{1.0f, 0.2f, -0.5f, 1.4f, 0.0f};
  std::vector<float> l;
  for (int r = 0; r < rows; ++r) l.insert(l.end(), base.begin(), base.end());
  int32_t* ids = d.zeros<int32_t>(rows);
  b->sample(ids, d.put(l), rows, V, temp, 2024);
  const std::vector<int32_t> got = d.get(ids, rows);
  std::vector<double> p(V), cnt(V);
  double z = 0;
  for (int i = 0; i < V; ++i) z += (p[i] = std::exp(base[i] / temp));
  for (int32_t id : got) cnt[id] += 1;
  double chi2 = 0;
  for (int i = 0; i < V; ++i) chi2 += std::pow(cnt[i] - rows * p[i] / z, 2) / (rows * p[i] / z);
  EXPECT_LT(chi2, 18.5);
}

TEST(Backend, ClearErrors) {
  EXPECT_THROW(make_backend("tpu"), Error);
  EXPECT_THROW(make_backend("cpu:1"), Error);
  EXPECT_THROW(make_backend("cuda:x"), Error);
  // A GPU backend that is not compiled in, or finds no device, says so.
  for (const char* kind : {"cuda", "hip"})
    if (backend_device_count(kind) == 0) {
      try {
        make_backend(std::string(kind) + ":0");
        ADD_FAILURE() << kind << " made a backend with no device";
      } catch (const Error& e) {
        EXPECT_TRUE(std::string(e.what()).find("not compiled") != std::string::npos ||
                    std::string(e.what()).find("device") != std::string::npos)
            << e.what();
      }
    }
}

// The GPU backends present: "cuda", "hip" with at least one device.

TEST(GpuBackend, EveryOpMatchesTheCpuBackend) {
  const std::vector<std::string> gpus = mxtest::gpu_backends();
  MXTEST_NEEDS_GPU_BACKEND(gpus);
  auto cpu = make_backend("cpu");
  const Results want = [&] {
    const mxtest::F32Activations f32_products;  // what the GPU kernels compute
    return run_ops(*cpu);
  }();
  for (const std::string& kind : gpus) {
    auto gpu = make_backend(kind);
    std::printf("[ gpu      ] %s\n", gpu->name().c_str());
    const Results got = run_ops(*gpu);
    for (const auto& [name, ref] : want) {
      const std::vector<float>& g = got.at(name);
      ASSERT_EQ(g.size(), ref.size()) << name;
      if (name == "sample") {  // the same keys up to float rounding: nearly every draw agrees
        int same = 0;
        for (size_t i = 0; i < g.size(); ++i) same += g[i] == ref[i];
        EXPECT_GE(same, int(g.size()) - 2) << kind << " " << name;
        continue;
      }
      const bool exact = name.find("ids") != std::string::npos || name == "argmax" ||
                         name.rfind("kv_write", 0) == 0 || name == "embed" || name.rfind("fill", 0) == 0;
      // MXFP4 on the CPU quantizes activations to int8; the GPU keeps them f32.
      const float rel = exact ? 0.0f : name.find("MXFP4") != std::string::npos ? 2e-2f : 2e-4f;
      const float tol = rel * std::max(1.0f, max_abs(ref));
      if (name.rfind("matmul MXFP4", 0) == 0 && name.find("f32 ref") == std::string::npos) {
        // Against the exact product, the GPU's f32 activations leave only summation-order error.
        const std::vector<float>& exact = want.at(name + " f32 ref");
        float e = 0;
        for (size_t i = 0; i < g.size(); ++i) e = std::max(e, std::fabs(g[i] - exact[i]));
        EXPECT_LE(e, 2e-4f * std::max(1.0f, max_abs(exact))) << kind << " " << name << " vs the f32 product";
        std::printf("[ gpu      ] %-28s max err vs f32 product %.3g\n", name.c_str(), e);
      }
      float worst = 0;
      for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::fabs(g[i] - ref[i]));
      EXPECT_LE(worst, tol) << kind << " " << name << " (max |ref| " << max_abs(ref) << ")";
      std::printf("[ gpu      ] %-28s max err %.3g\n", name.c_str(), worst);
    }
  }
}

}  // namespace
}  // namespace mx

namespace mx {

// An expert id outside [0, E) (not something moe_route makes, but ids are data)
// adds nothing to its token on the GPU: the sort skips the pair, and the combine
// must not read its slot, which no expert wrote (stale workspace: any bits).
TEST(GpuBackend, MoeIdsOutsideTheExpertsAddNothing) {
  const std::vector<std::string> gpus = mxtest::gpu_backends();
  MXTEST_NEEDS_GPU_BACKEND(gpus);
  for (const std::string& kind : gpus) {
    auto gpu = make_backend(kind);
    Dev d(*gpu);
    std::mt19937 rng(7);
    const int T = 3, E = 4, k = 2, D = 64, Hd = 32;
    const HostWeight g = make_weight(DType::BF16, Hd, D, E, rng), u = make_weight(DType::BF16, Hd, D, E, rng),
                     dn = make_weight(DType::BF16, D, Hd, E, rng);
    const ExpertWeights ew = ExpertWeights::stacked(d.weight(g), d.weight(u), d.weight(dn));
    const std::vector<float> x = randn(T * D, rng), w = {0.5f, 0.25f, 0.75f, 1.0f, 0.3f, 0.6f};
    // Fill the workspace's slots with a first run, so stale values are there to misread.
    float* out = d.zeros<float>(T * D);
    gpu->moe_ffn(out, d.put(x), d.put(std::vector<int32_t>{0, 1, 2, 3, 1, 2}), d.put(w), T, k, ew);
    // Token 0's second id and token 2's first are out of range; the reference gives them weight 0.
    const std::vector<int32_t> bad = {0, 9, 2, 3, -1, 2}, zeroed = {0, 1, 2, 3, 1, 2};
    std::vector<float> w0 = w;
    w0[1] = w0[4] = 0.0f;
    gpu->moe_ffn(out, d.put(x), d.put(bad), d.put(w), T, k, ew);
    const std::vector<float> got = d.get(out, T * D);
    gpu->moe_ffn(out, d.put(x), d.put(zeroed), d.put(w0), T, k, ew);
    const std::vector<float> want = d.get(out, T * D);
    for (int i = 0; i < T * D; ++i) ASSERT_EQ(got[i], want[i]) << kind << " element " << i;
  }
}

}  // namespace mx
