// Bandwidth and throughput of a Backend's kernels (backends/backend.h) against
// the memory bandwidth the same backend measures for a plain copy:
//   copy       device-to-device copy, bytes read + written per second (the roofline)
//   gemv       matmul at T = 1 and 4 tokens per weight in each format: weight bytes
//              (data + scales) per second, and the fraction of the copy's
//   moe        moe_ffn at decode (T = 1, 4) over the selected experts' bytes
//   gemm       matmul at T = 512 (prefill): TFLOP/s
// Weights rotate through enough copies to exceed the caches (the H200's L2 is
// 60 MB). Prints figures; decides nothing.
//   build/bench_backend [--backend cpu|cuda|hip] [--shape medium|dsv3|air] [--min-ms N]
// --shape medium: the synthetic medium MoE's matrices (hidden 1024, expert 512,
// 64 experts top-8); dsv3: DeepSeek-V3's (hidden 7168, expert 2048, 256 top-8);
// air: GLM-4.5-Air's (hidden 4096, expert 1408, 128 top-8).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "backends/backend.h"

using namespace mx;

namespace {

using Clock = std::chrono::steady_clock;

// Seconds per call of fn, run until min_ms have passed (after one warm-up call).
double time_per_call(Backend& b, double min_ms, const std::function<void(int)>& fn) {
  fn(0);
  b.synchronize();
  int n = 0;
  const auto t0 = Clock::now();
  double el = 0;
  do {
    fn(++n);
    if (n % 8 == 0 || el == 0) b.synchronize();
    el = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (el * 1e3 < min_ms || n < 8);
  b.synchronize();
  return std::chrono::duration<double>(Clock::now() - t0).count() / n;
}

// Valid bytes of a weight format (no NaN / Inf patterns), tiled into backend memory.
void fill(Backend& b, void* dst, size_t bytes, DType dt, bool scales, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> pat(std::min<size_t>(bytes, size_t(8) << 20));
  if (scales && dt == DType::MXFP4) {
    for (auto& v : pat) v = uint8_t(120 + rng() % 8);  // E8M0 around 2^-7 .. 2^0
  } else if (scales) {  // F8_E4M3 block scales: f32 near 1/64
    for (size_t i = 0; i + 4 <= pat.size(); i += 4) {
      const float f = std::ldexp(1.0f, -6 - int(rng() % 3));
      std::memcpy(&pat[i], &f, 4);
    }
  } else if (dt == DType::BF16) {
    for (size_t i = 0; i + 2 <= pat.size(); i += 2) {
      const uint16_t h = f32_to_bf16(std::ldexp(float(rng() % 2000) / 1000.0f - 1.0f, -4));
      std::memcpy(&pat[i], &h, 2);
    }
  } else if (dt == DType::F32) {
    for (size_t i = 0; i + 4 <= pat.size(); i += 4) {
      const float f = float(rng() % 2000) / 16000.0f - 0.0625f;
      std::memcpy(&pat[i], &f, 4);
    }
  } else if (dt == DType::F8_E4M3) {
    for (auto& v : pat) v = uint8_t(rng() % 0x7e) | uint8_t(rng() % 2 << 7);  // never 0x7f / 0xff (NaN)
  } else {
    for (auto& v : pat) v = uint8_t(rng());  // MXFP4 nibbles: every code is a value
  }
  for (size_t o = 0; o < bytes; o += pat.size())
    b.upload(static_cast<char*>(dst) + o, pat.data(), std::min(pat.size(), bytes - o));
}

// `copies` weight stacks of [experts, out, in] in one format, back to back.
struct Weights {
  std::vector<DevBuffer> bufs;
  std::vector<DevWeight> w;
};
Weights make_weights(Backend& b, DType dt, int64_t out, int64_t in, int experts, int copies) {
  Weights r;
  for (int c = 0; c < copies; ++c) {
    DevWeight w;
    w.dtype = dt, w.out = out, w.in = in, w.experts = experts;
    if (dt == DType::F8_E4M3) w.scale_cols = (in + 127) / 128, w.scales = &w;  // mark "has scales"
    const size_t db = w.data_bytes() * experts, sb = w.scale_bytes() * experts;
    r.bufs.emplace_back(b, db);
    w.data = r.bufs.back().get();
    fill(b, w.data, db, dt, false, 7 + c);
    w.scales = nullptr;
    if (sb) {
      r.bufs.emplace_back(b, sb);
      w.scales = r.bufs.back().get();
      fill(b, w.scales, sb, dt, true, 9 + c);
    }
    r.w.push_back(w);
  }
  return r;
}

size_t bytes_of(const DevWeight& w) { return w.data_bytes() + w.scale_bytes(); }

// Bytes of one [out, in] matrix in a format, scales included.
size_t matrix_bytes(DType dt, int64_t out, int64_t in) {
  DevWeight w;
  w.dtype = dt, w.out = out, w.in = in;
  if (dt == DType::F8_E4M3) w.scale_cols = (in + 127) / 128, w.scales = &w;  // mark "has scales"
  return bytes_of(w);
}

float* act(Backend& b, std::vector<DevBuffer>& keep, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  keep.emplace_back(b, n * 4);
  b.upload(keep.back().get(), v.data(), n * 4);
  return keep.back().get<float>();
}

}  // namespace

int main(int argc, char** argv) {
  std::string spec = "cpu", shape = "medium";
  double min_ms = 200;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--backend" && i + 1 < argc) spec = argv[++i];
    else if (a == "--shape" && i + 1 < argc) shape = argv[++i];
    else if (a == "--min-ms" && i + 1 < argc) min_ms = std::atof(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_backend [--backend cpu|cuda|hip] [--shape medium|dsv3|air] [--min-ms N]\n");
      return 2;
    }
  }
  if (shape != "medium" && shape != "dsv3" && shape != "air") {
    std::fprintf(stderr, "error: --shape is medium, dsv3 or air\n");
    return 2;
  }
  try {
    auto b = make_backend(spec);
    const bool gpu = spec != "cpu";
    // Working sets: well past the caches (GPU L2 60 MB; CPU L3 tens of MB).
    const size_t rotate_bytes = gpu ? size_t(1) << 30 : size_t(256) << 20;
    std::printf("backend: %s; shape %s; each figure over >= %.0f ms\n", b->name().c_str(), shape.c_str(), min_ms);

    // 1. The roofline: a device-to-device copy.
    const size_t cb = gpu ? size_t(1) << 30 : size_t(256) << 20;
    DevBuffer src(*b, cb), dst(*b, cb);
    fill(*b, src.get(), cb, DType::U8, false, 1);
    const double tc = time_per_call(*b, min_ms, [&](int) { b->copy(dst.get(), src.get(), cb); });
    const double copy_gbs = 2.0 * cb / tc / 1e9;
    std::printf("copy: %.1f GB/s (read + write, %.0f MiB)\n", copy_gbs, cb / 1048576.0);

    const bool ds = shape == "dsv3", air = shape == "air";
    const int D = ds ? 7168 : air ? 4096 : 1024, H = ds ? 2048 : air ? 1408 : 512, E = ds ? 256 : air ? 128 : 64, K = 8;
    // 2. GEMV over the attention / dense shapes and an expert's, every format.
    std::printf("\n%-8s %-13s %4s %10s %10s %8s\n", "format", "shape", "T", "us/call", "GB/s", "of copy");
    std::vector<DevBuffer> keep;
    float* x = act(*b, keep, size_t(512) * std::max(D, 4 * H), 3);
    float* y = act(*b, keep, size_t(512) * std::max(D, 4 * H), 4);
    for (DType dt : {DType::BF16, DType::MXFP4, DType::F8_E4M3, DType::F32}) {
      for (auto [out, in] : std::vector<std::pair<int, int>>{{D, D}, {4 * H, D}, {D, 4 * H}, {H, D}}) {
        const int copies = int(std::max<size_t>(1, rotate_bytes / matrix_bytes(dt, out, in)));
        Weights w = make_weights(*b, dt, out, in, 1, std::min(copies, 4096));
        for (int T : {1, 4}) {
          const double t = time_per_call(*b, min_ms, [&](int i) { b->matmul(y, x, w.w[i % w.w.size()], T); });
          const double gbs = bytes_of(w.w[0]) / t / 1e9;
          std::printf("%-8s %5dx%-7d %4d %10.2f %10.1f %7.0f%%\n", dtype_name(dt), out, in, T, t * 1e6, gbs,
                      100 * gbs / copy_gbs);
        }
      }
    }

    // 3. MoE decode: moe_ffn over E experts of [H, D] / [D, H], k of them per token.
    std::printf("\n%-8s %-22s %4s %10s %10s %8s\n", "format", "moe (E x H x D, top-k)", "T", "us/call", "GB/s",
                "of copy");
    for (DType dt : {DType::BF16, DType::MXFP4}) {
      const size_t expert = 3 * matrix_bytes(dt, H, D);  // gate, up, down
      const size_t stack = expert * E;
      const int copies = int(std::clamp<size_t>(rotate_bytes / stack, 1, 8));
      Weights g = make_weights(*b, dt, H, D, E, copies), u = make_weights(*b, dt, H, D, E, copies),
              dn = make_weights(*b, dt, D, H, E, copies);
      for (int T : {1, 4}) {
        // Each token's k experts, distinct across tokens (the worst case for
        // reuse); successive calls take disjoint sets of experts and rotate the
        // copies, so no call finds its experts in a cache.
        const int sets = std::max(1, E / (T * K));
        std::vector<int32_t> ids(size_t(sets) * T * K);
        for (int s = 0; s < sets; ++s)
          for (int t = 0; t < T; ++t) {
            int32_t* row = ids.data() + (size_t(s) * T + t) * K;
            for (int j = 0; j < K; ++j) row[j] = (s * T * K + t * K + j) % E;
            std::sort(row, row + K);
          }
        std::vector<float> wts(size_t(T) * K, 1.0f / K);
        keep.emplace_back(*b, ids.size() * 4);
        b->upload(keep.back().get(), ids.data(), ids.size() * 4);
        const int32_t* dids = keep.back().get<int32_t>();
        keep.emplace_back(*b, wts.size() * 4);
        b->upload(keep.back().get(), wts.data(), wts.size() * 4);
        const float* dw = keep.back().get<float>();
        std::vector<ExpertWeights> ew;
        for (int c = 0; c < copies; ++c) ew.push_back(ExpertWeights::stacked(g.w[c], u.w[c], dn.w[c]));
        const double t = time_per_call(*b, min_ms, [&](int i) {
          const size_t c = (i / sets) % copies;
          b->moe_ffn(y, x, dids + size_t(i % sets) * T * K, dw, T, K, ew[c]);
        });
        const double bytes = double(T) * K * expert;  // distinct experts: each read once
        std::printf("%-8s %4dx%4dx%-5d top-%d %4d %10.2f %10.1f %7.0f%%\n", dtype_name(dt), E, H, D, K, T, t * 1e6,
                    bytes / t / 1e9, 100 * bytes / t / 1e9 / copy_gbs);
      }
    }

    // 4. Prefill GEMM.
    std::printf("\n%-8s %-13s %4s %10s %10s\n", "format", "shape", "T", "us/call", "TFLOP/s");
    for (DType dt : {DType::BF16, DType::MXFP4, DType::F8_E4M3}) {
      Weights w = make_weights(*b, dt, 4 * H, D, 1, 1);
      const int T = gpu ? 512 : 64;
      const double t = time_per_call(*b, min_ms, [&](int) { b->matmul(y, x, w.w[0], T); });
      std::printf("%-8s %5dx%-7d %4d %10.2f %10.2f\n", dtype_name(dt), 4 * H, D, T, t * 1e6,
                  2.0 * T * 4 * H * D / t / 1e12);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
