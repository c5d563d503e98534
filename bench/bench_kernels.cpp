// CPU kernel throughput: decode GEMV (weights streamed from DRAM), prefill GEMM,
// for F32, BF16, MXFP4 and block FP8 weights (GEMV GB/s counts the weight bytes
// read, block scales included: 4.25 bits per element for MXFP4), paged attention
// with f32 and bf16 products (a prefill chunk at the end of a long context; one
// decode token),
// and STREAM-like memory bandwidth on the same thread pool, so the GEMV GB/s can be
// read against what the machine's memory delivers.
//   build/bench_kernels [--benchmark_filter=...]   (MXSERVE_THREADS / MXSERVE_ISA apply)
// GEMV cycles through enough copies of the weight matrix to exceed the last-level
// cache several times over, as a real decode step does across layers.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "backends/cpu/attention.h"
#include "backends/cpu/matmul.h"
#include "backends/cpu/matmul_impl.h"

namespace {

using namespace mx;

constexpr size_t kColdBytes = size_t(256) << 20;  // working set well beyond a 32 MiB L3

ThreadPool& pool() { return global_pool(); }

// A counter shown as x per second (x is per iteration).
benchmark::Counter per_second(double x) {
  return benchmark::Counter(x, benchmark::Counter::kIsIterationInvariantRate);
}

// Fills a buffer with small pseudo-random values of the given dtype (cheap LCG:
// initialising hundreds of MiB must not dominate the run). MXFP4 and F8_E4M3 get
// random codes (no FP8 NaN codes); their scales are filled by make_scales.
void fill(void* p, DType dt, int64_t n, uint32_t seed) {
  uint32_t s = seed * 2654435761u + 1;
  auto next = [&] {
    s = s * 1664525u + 1013904223u;
    return float(int32_t(s >> 9) - (1 << 22)) / float(1 << 22);  // [-1, 1)
  };
  if (dt == DType::F32) {
    float* f = static_cast<float*>(p);
    for (int64_t i = 0; i < n; ++i) f[i] = next();
  } else if (dt == DType::BF16) {
    uint16_t* h = static_cast<uint16_t*>(p);
    for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(next());
  } else {
    uint8_t* b = static_cast<uint8_t*>(p);
    const size_t bytes = dtype_bytes(dt, n);
    for (size_t i = 0; i < bytes; ++i) {
      s = s * 1664525u + 1013904223u;
      b[i] = uint8_t(s >> 24);
      if (dt == DType::F8_E4M3 && (b[i] & 0x7f) == 0x7f) b[i] = 0x38;
    }
  }
}

// Block scales of a quantized weight (MXFP4: E8M0 bytes near 1; F8_E4M3: 128x128 f32).
Buffer make_scales(Tensor& t, uint32_t seed) {
  const int64_t out = t.shape[0], in = t.shape[1];
  Buffer b;
  if (t.dtype == DType::MXFP4) {
    b = Buffer(size_t(out * in / 32));
    uint8_t* p = static_cast<uint8_t*>(b.data());
    for (int64_t i = 0; i < out * in / 32; ++i) p[i] = uint8_t(120 + (i * 7 + seed) % 8);
  } else if (t.dtype == DType::F8_E4M3) {
    const int64_t n = (out + 127) / 128 * ((in + 127) / 128);
    b = Buffer(size_t(n) * 4);
    float* p = static_cast<float*>(b.data());
    for (int64_t i = 0; i < n; ++i) p[i] = 1e-3f * float(1 + (i + seed) % 7);
  } else {
    return b;
  }
  t.scales = b.data();
  return b;
}

struct Problem {
  std::vector<OwnedTensor> w;  // copies of the weight, cycled through
  std::vector<Buffer> scales;  // their block scales (quantized dtypes)
  std::vector<float> x, y;
  Problem(DType dt, int64_t out, int64_t in, int64_t n_tokens, size_t min_bytes) {
    const size_t bytes = dtype_bytes(dt, out * in);
    const size_t copies = std::max<size_t>(1, (min_bytes + bytes - 1) / bytes);
    for (size_t c = 0; c < copies; ++c) {
      w.push_back(OwnedTensor::make(dt, {out, in}));
      fill(w.back().t.data, dt, out * in, uint32_t(c + 1));
      scales.push_back(make_scales(w.back().t, uint32_t(c)));
    }
    x.resize(size_t(n_tokens * in));
    fill(x.data(), DType::F32, n_tokens * in, 7);
    y.resize(size_t(n_tokens * out));
  }
};

// Decode and small batches (speculative verification, a few sequences): weights
// streamed from DRAM once per call, for 1..8 tokens.
void BM_Gemv(benchmark::State& st, DType dt, int64_t out, int64_t in) {
  const int64_t n = st.range(0);
  Problem p(dt, out, in, n, kColdBytes);
  size_t c = 0;
  for (auto _ : st) {
    matmul(p.y.data(), p.x.data(), p.w[c].t, n, pool());
    c = (c + 1) % p.w.size();
    benchmark::DoNotOptimize(p.y.data());
    benchmark::ClobberMemory();
  }
  const double bytes = double(p.w[0].t.storage_bytes());  // weights + block scales
  st.SetBytesProcessed(int64_t(st.iterations() * bytes));
  st.counters["GB/s"] = per_second(bytes / 1e9);
  st.SetLabel(matmul_isa_label(best_isa()) + ", " + std::to_string(p.w.size()) + " copies");
}

// The same GEMV on one copy of the weights, which stay in L2 / L3 across calls: the
// kernel's own ceiling. A cold GEMV well below its hot figure is memory-bound; one
// close to it is limited by its arithmetic, and a faster memory would not help it.
void BM_GemvHot(benchmark::State& st, DType dt, int64_t out, int64_t in) {
  Problem p(dt, out, in, 1, 0);
  for (auto _ : st) {
    matmul(p.y.data(), p.x.data(), p.w[0].t, 1, pool());
    benchmark::DoNotOptimize(p.y.data());
    benchmark::ClobberMemory();
  }
  const double bytes = double(p.w[0].t.storage_bytes());
  st.SetBytesProcessed(int64_t(st.iterations() * bytes));
  st.counters["GB/s"] = per_second(bytes / 1e9);
  st.SetLabel(matmul_isa_label(best_isa()));
}

void BM_Gemm(benchmark::State& st, DType dt, int64_t out, int64_t in) {
  const int64_t n = st.range(0);
  Problem p(dt, out, in, n, 0);  // weights reused across the batch: cache-resident is fine
  for (auto _ : st) {
    matmul(p.y.data(), p.x.data(), p.w[0].t, n, pool());
    benchmark::DoNotOptimize(p.y.data());
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * double(out) * double(in) * double(n);
  st.counters["GFLOP/s"] = per_second(flops / 1e9);
  st.SetLabel(matmul_isa_label(best_isa()));
}

// The AMX kernels' activation packing (bf16 rounding and a 16 x 16 dword transpose per
// 16 tokens and 32 columns, matmul_bf16_amx.cpp), one thread: what an AMX matmul pays
// per call on top of the tiles. Runs on any AVX512-BF16 CPU (the packer is AVX-512).
void BM_AmxPack(benchmark::State& st, int64_t in) {
  if (!cpu_features().avx512bf16) return st.SkipWithError("needs AVX512-BF16");
  using namespace matmul_detail;
  const int64_t n = st.range(0), groups = amx_groups(n);
  const AmxPackFn pack = amx_bf16_kernels_emulated().amx_pack;
  std::vector<float> x(size_t(n * in));
  fill(x.data(), DType::F32, n * in, 3);
  std::vector<uint32_t> xp(size_t(groups * amx_chunks(in) * kAmxBlockDwords));
  for (auto _ : st) {
    for (int64_t g = 0; g < groups; ++g) amx_pack_group(pack, x.data(), n, in, g, xp.data());
    benchmark::DoNotOptimize(xp.data());
    benchmark::ClobberMemory();
  }
  st.counters["GB/s"] = per_second(double(n * in) * 4 / 1e9);  // f32 activations read
}
BENCHMARK_CAPTURE(BM_AmxPack, in896, 896)->Arg(1)->Arg(512)->ArgName("tokens")->UseRealTime();
BENCHMARK_CAPTURE(BM_AmxPack, in4864, 4864)->Arg(1)->Arg(512)->ArgName("tokens")->UseRealTime();

#define GEMV(dt, out, in) \
  BENCHMARK_CAPTURE(BM_Gemv, dt##_##out##x##in, DType::dt, out, in) \
      ->Arg(1)->Arg(2)->Arg(4)->Arg(8)->ArgName("tokens")->UseRealTime()
GEMV(F32, 896, 4864);
GEMV(F32, 4864, 896);
GEMV(F32, 4096, 4096);
GEMV(F32, 2048, 8192);
GEMV(BF16, 896, 4864);
GEMV(BF16, 4864, 896);
GEMV(BF16, 4096, 4096);
GEMV(BF16, 2048, 8192);
GEMV(MXFP4, 896, 4864);
GEMV(MXFP4, 4864, 896);
GEMV(MXFP4, 4096, 4096);
GEMV(MXFP4, 2048, 8192);
GEMV(F8_E4M3, 896, 4864);
GEMV(F8_E4M3, 4864, 896);
GEMV(F8_E4M3, 4096, 4096);
GEMV(F8_E4M3, 2048, 8192);

#define GEMV_HOT(dt, out, in) \
  BENCHMARK_CAPTURE(BM_GemvHot, dt##_##out##x##in, DType::dt, out, in)->UseRealTime()
GEMV_HOT(BF16, 896, 896);
GEMV_HOT(BF16, 4864, 896);
GEMV_HOT(MXFP4, 896, 896);
GEMV_HOT(MXFP4, 4864, 896);
GEMV_HOT(MXFP4, 896, 4864);
GEMV_HOT(F8_E4M3, 4864, 896);

#define GEMM(dt, out, in)                                           \
  BENCHMARK_CAPTURE(BM_Gemm, dt##_##out##x##in, DType::dt, out, in) \
      ->Arg(16)->Arg(64)->Arg(256)->ArgName("tokens")->UseRealTime()
GEMM(F32, 4864, 896);
GEMM(F32, 896, 4864);
GEMM(BF16, 4864, 896);
GEMM(BF16, 896, 4864);
GEMM(MXFP4, 4864, 896);
GEMM(MXFP4, 896, 4864);
GEMM(F8_E4M3, 4864, 896);
GEMM(F8_E4M3, 896, 4864);

// --- Paged attention ----------------------------------------------------------
// Qwen3-0.5B's shape (14 query heads over 2 KV heads of 64), or with `mla`
// DeepSeek-V3's absorbed MLA at our medium preset's size (16 heads over one
// latent of 288 = 256 + 32 rope dims, values the latent's first 256), one
// sequence of `ctx` positions in blocks of 16; the last n_q positions query it
// (a prefill chunk, or n_q = 1: decode). GFLOP/s counts Q.K^T and P.V: 2 (hd +
// vd) per (row, key) attended; GB/s the cache bytes one call reads. With
// `layers` > 1 the calls go round that many caches, as a decode step goes
// through a model's layers: 24 layers of 4096 positions (50 MB in bf16) do not
// stay in this machine's L3, so the cache comes from DRAM as it does in the model.
void BM_Attention(benchmark::State& st, AttnProducts products, DType cache, bool mla, bool fma = false) {
  const int ctx = int(st.range(0)), n_q = int(st.range(1)), layers = int(st.range(2));
  const int H = mla ? 16 : 14, G = mla ? 1 : 2, hd = mla ? 288 : 64, vd = mla ? 256 : 64, bs = 16;
  const int blocks = (ctx + bs - 1) / bs;
  if (products == AttnProducts::Bf16 && !attention_bf16_supported(Isa::Avx512)) {
    st.SkipWithError("no AVX512-BF16 on this CPU");
    return;
  }
  if (fma && !attention_bf16_fma_supported()) {
    st.SkipWithError("vdpbf16ps is not two FMAs on this CPU");
    return;
  }
  struct FmaSetting {  // this benchmark's choice, the table's back after it
    bool was;
    ~FmaSetting() { set_attention_bf16_fma(was); }
  } fma_setting{set_attention_bf16_fma(fma)};
  const Isa isa = products == AttnProducts::Bf16 ? Isa::Avx512 : best_isa();
  const int64_t kwidth = int64_t(G) * hd, vwidth = mla ? 0 : int64_t(G) * vd, slots = int64_t(blocks) * bs;
  std::vector<Buffer> k, v;
  for (int l = 0; l < layers; ++l) {
    k.emplace_back(dtype_bytes(cache, slots * kwidth)), v.emplace_back(dtype_bytes(cache, slots * vwidth));
    fill(k.back().data(), cache, slots * kwidth, 1 + 2 * l);
    fill(v.back().data(), cache, slots * vwidth, 2 + 2 * l);
  }
  std::vector<float> q(size_t(n_q) * H * hd), out(size_t(n_q) * H * vd);
  fill(q.data(), DType::F32, int64_t(q.size()), 3);
  std::vector<int32_t> table(blocks), seq(n_q, 0), pos(n_q);
  for (int b = 0; b < blocks; ++b) table[b] = b;
  for (int i = 0; i < n_q; ++i) pos[i] = ctx - n_q + i;
  AttnArgs a{H, G, hd, 0.125f};
  if (mla) a.v_dim = vd, a.values_in_k = true;
  AttnScratch scratch;
  int layer = 0;
  for (auto _ : st) {
    const PagedKV kv{k[layer].data(), mla ? nullptr : v[layer].data(), int(kwidth), int(vwidth), bs, cache};
    cpu_paged_attention(isa, products, out.data(), q.data(), H * hd, kv, a, table.data(), blocks, seq.data(),
                        pos.data(), n_q, pool(), scratch);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    layer = (layer + 1) % layers;
  }
  double pairs = 0;
  for (int i = 0; i < n_q; ++i) pairs += double(pos[i] + 1) * H;
  st.counters["GFLOP/s"] = per_second(2.0 * (hd + vd) * pairs / 1e9);
  st.counters["GB/s"] = per_second(double(dtype_bytes(cache, int64_t(ctx) * (kwidth + vwidth))) / 1e9);
  st.SetLabel(std::string(isa_name(isa)) + (products == AttnProducts::Bf16 ? " bf16 products" : " f32 products") +
              (fma ? " on FMAs" : "") +
              ", " + dtype_name(cache) + " cache" + (mla ? ", MLA" : ""));
}

#define ATTENTION(products, cache)                                                                    \
  BENCHMARK_CAPTURE(BM_Attention, products##_##cache, AttnProducts::products, DType::cache, false)    \
      ->Args({4096, 512, 1})->Args({16384, 512, 1})->Args({4096, 1, 1})->Args({16384, 1, 1})            \
      ->Args({65536, 1, 1})->Args({4096, 1, 24})->Args({16384, 1, 24})                                 \
      ->ArgNames({"ctx", "q", "layers"})                                                              \
      ->UseRealTime()
ATTENTION(F32, F32);
ATTENTION(F32, BF16);
ATTENTION(Bf16, BF16);
ATTENTION(Bf16, F8_E4M3);
BENCHMARK_CAPTURE(BM_Attention, Bf16_BF16_MLA, AttnProducts::Bf16, DType::BF16, true)
    ->Args({4096, 512, 1})->Args({4096, 1, 1})->Args({16384, 1, 1})->Args({4096, 1, 12})
    ->ArgNames({"ctx", "q", "layers"})
    ->UseRealTime();
// The bf16 products' prefill tiles on FMAs (attention.h; the same bits), on a chunk.
BENCHMARK_CAPTURE(BM_Attention, Bf16Fma_BF16, AttnProducts::Bf16, DType::BF16, false, true)
    ->Args({4096, 512, 1})->Args({16384, 512, 1})->ArgNames({"ctx", "q", "layers"})->UseRealTime();
BENCHMARK_CAPTURE(BM_Attention, Bf16Fma_F8_E4M3, AttnProducts::Bf16, DType::F8_E4M3, false, true)
    ->Args({4096, 512, 1})->ArgNames({"ctx", "q", "layers"})->UseRealTime();
BENCHMARK_CAPTURE(BM_Attention, Bf16Fma_BF16_MLA, AttnProducts::Bf16, DType::BF16, true, true)
    ->Args({4096, 512, 1})->ArgNames({"ctx", "q", "layers"})->UseRealTime();

// --- STREAM-like bandwidth, parallel over the same pool -------------------------

struct Arrays {
  static constexpr int64_t n = int64_t(kColdBytes / sizeof(float));  // 256 MiB each
  Buffer a{kColdBytes}, b{kColdBytes}, c{kColdBytes};
  Arrays() {
    // First touch from the pool, as the kernels will later read it.
    pool().parallel_for(n, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        A()[i] = 1.0f;
        B()[i] = 2.0f;
        C()[i] = 0.5f;
      }
    }, 1 << 16);
  }
  float* A() const { return static_cast<float*>(a.data()); }
  float* B() const { return static_cast<float*>(b.data()); }
  float* C() const { return static_cast<float*>(c.data()); }
};

Arrays& arrays() {
  static Arrays arr;
  return arr;
}

void report(benchmark::State& st, double bytes_per_iter) {
  st.SetBytesProcessed(int64_t(st.iterations() * bytes_per_iter));
  st.counters["GB/s"] = per_second(bytes_per_iter / 1e9);
}

// Read only: the access pattern of a GEMV. Integer sum so the loop vectorises.
// Prefetch: also a software prefetch 1024 bytes ahead per 64-byte line, as the GEMV
// tiles do (on AMD Zen 3 one thread read 6.8 GB/s without it, while the GEMVs and
// llama.cpp's streamed 9: the plain read is not the ceiling there).
template <bool Prefetch>
void BM_StreamRead(benchmark::State& st) {
  Arrays& r = arrays();
  const int64_t words = Arrays::n / 2;
  const uint64_t* a = static_cast<const uint64_t*>(r.a.data());
  std::vector<uint64_t> part(size_t(pool().size()) * 8);  // one cache line per range
  for (auto _ : st) {
    pool().parallel_for(pool().size(), [&](int64_t tb, int64_t te) {
      for (int64_t t = tb; t < te; ++t) {
        const int64_t lo = words * t / pool().size(), hi = words * (t + 1) / pool().size();
        uint64_t s = 0;
        if constexpr (Prefetch) {
          int64_t i = lo;
          for (; i + 8 <= hi; i += 8) {
            __builtin_prefetch(a + i + 128);
            for (int k = 0; k < 8; ++k) s += a[i + k];
          }
          for (; i < hi; ++i) s += a[i];
        } else {
          for (int64_t i = lo; i < hi; ++i) s += a[i];
        }
        part[size_t(t) * 8] = s;
      }
    });
    benchmark::DoNotOptimize(part.data());
  }
  report(st, double(kColdBytes));
}

void BM_StreamCopy(benchmark::State& st) {  // c = a
  Arrays& r = arrays();
  for (auto _ : st) {
    pool().parallel_for(Arrays::n, [&](int64_t lo, int64_t hi) {
      std::memcpy(r.C() + lo, r.A() + lo, size_t(hi - lo) * sizeof(float));
    }, 1 << 16);
    benchmark::ClobberMemory();
  }
  report(st, 2.0 * double(kColdBytes));  // STREAM convention: bytes read + written
}

void BM_StreamTriad(benchmark::State& st) {  // a = b + s * c
  Arrays& r = arrays();
  const float s = 3.0f;
  for (auto _ : st) {
    pool().parallel_for(Arrays::n, [&](int64_t lo, int64_t hi) {
      float* a = r.A();
      const float *b = r.B(), *c = r.C();
      for (int64_t i = lo; i < hi; ++i) a[i] = b[i] + s * c[i];
    }, 1 << 16);
    benchmark::ClobberMemory();
  }
  report(st, 3.0 * double(kColdBytes));
}

BENCHMARK(BM_StreamRead<false>)->Name("BM_StreamRead")->UseRealTime();
BENCHMARK(BM_StreamRead<true>)->Name("BM_StreamReadPrefetch")->UseRealTime();
BENCHMARK(BM_StreamCopy)->UseRealTime();
BENCHMARK(BM_StreamTriad)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // The machine next to every figure (BENCHMARKS.md quotes them).
  benchmark::AddCustomContext("cpu", cpu_model_name() + " (" + cpu_key() + ")");
  benchmark::AddCustomContext("isa", std::string(isa_name(best_isa())) + ", features " + cpu_features_string());
  benchmark::AddCustomContext("bf16_activations", matmul_bf16_activations(best_isa()) ? "on" : "off");
  benchmark::AddCustomContext("amx", matmul_amx_status() + " (MXSERVE_AMX=0 for the AVX-512 kernels)");
  benchmark::AddCustomContext(
      "bf16_attention", attention_products(best_isa(), DType::BF16) == AttnProducts::Bf16 ? "on (bf16 / fp8 caches)"
                                                                                            : "off");
  benchmark::AddCustomContext("threads", std::to_string(pool().size()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
