// Kernel tuner (backends/cpu/tuner.h), used by `mxserve tune`.
#include "backends/cpu/tuner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>

#include "core/tensor.h"
#include "backends/cpu/attention.h"
#include "backends/cpu/matmul.h"

namespace mx {

namespace {
using Clock = std::chrono::steady_clock;

// Cheap deterministic fill of a weight of any supported dtype.
struct Weight {
  OwnedTensor t;
  Buffer scales;
};

Weight make_weight(DType dt, int64_t out, int64_t in, uint32_t seed) {
  Weight w;
  w.t = OwnedTensor::make(dt, {out, in});
  uint32_t s = seed * 2654435761u + 1;
  auto next = [&] { return s = s * 1664525u + 1013904223u; };
  const size_t bytes = w.t.t.nbytes();
  uint8_t* p = static_cast<uint8_t*>(w.t.t.data);
  if (dt == DType::F32) {
    for (int64_t i = 0; i < out * in; ++i) w.t.t.as<float>()[i] = float(int32_t(next() >> 9) - (1 << 22)) / float(1 << 22);
  } else if (dt == DType::BF16) {
    for (int64_t i = 0; i < out * in; ++i)
      w.t.t.as<uint16_t>()[i] = f32_to_bf16(float(int32_t(next() >> 9) - (1 << 22)) / float(1 << 22));
  } else {
    for (size_t i = 0; i < bytes; ++i) {
      uint8_t b = uint8_t(next() >> 24);
      if (dt == DType::F8_E4M3 && (b & 0x7f) == 0x7f) b = 0x38;
      p[i] = b;
    }
  }
  if (dt == DType::MXFP4) {
    w.scales = Buffer(size_t(out * in / 32));
    uint8_t* sc = static_cast<uint8_t*>(w.scales.data());
    for (int64_t i = 0; i < out * in / 32; ++i) sc[i] = uint8_t(118 + (next() >> 28));
    w.t.t.scales = w.scales.data();
  } else if (dt == DType::F8_E4M3) {
    const int64_t n = (out + 127) / 128 * ((in + 127) / 128);
    w.scales = Buffer(size_t(n) * 4);
    float* sc = static_cast<float*>(w.scales.data());
    for (int64_t i = 0; i < n; ++i) sc[i] = 1e-3f * float(1 + (next() >> 28));
    w.t.t.scales = w.scales.data();
  }
  return w;
}

// Times single calls of each candidate, interleaved call by call (candidate 0, 1,
// ..., 0, 1, ...), so that the interference of a shared machine (a preempted worker
// of a 2-thread pool costs a whole scheduler tick) falls on all candidates alike;
// at least min_calls per candidate and min_s in all. Returns each one's lower
// quartile: robust to stalls, not fooled by one lucky call.
template <class F>
std::vector<double> time_interleaved(size_t n_cands, F&& call, double min_s, int min_calls) {
  std::vector<std::vector<double>> s(n_cands);
  for (size_t k = 0; k < n_cands; ++k) call(k);  // warm up
  const auto t0 = Clock::now();
  for (int i = 0; i < min_calls || std::chrono::duration<double>(Clock::now() - t0).count() < min_s; ++i)
    for (size_t k = 0; k < n_cands; ++k) {
      const auto a = Clock::now();
      call(k);
      s[k].push_back(std::chrono::duration<double>(Clock::now() - a).count());
    }
  std::vector<double> q;
  for (auto& v : s) {
    std::sort(v.begin(), v.end());
    q.push_back(v[v.size() / 4]);
  }
  return q;
}

// The fastest candidate, but the first (the default) unless another beats it by 3%:
// noise must not churn the table.
size_t pick(const std::vector<double>& t) {
  size_t b = size_t(std::min_element(t.begin(), t.end()) - t.begin());
  return t[b] < 0.97 * t[0] ? b : 0;
}

bool same_gemv(const KernelConfig& a, const KernelConfig& b) {
  return a.gemv_rows == b.gemv_rows && a.prefetch == b.prefetch;
}
bool same_gemm(const KernelConfig& a, const KernelConfig& b) {
  return a.tile_tokens == b.tile_tokens && a.tile_rows == b.tile_rows && a.chunk_kib == b.chunk_kib &&
         a.rowblock_kib == b.rowblock_kib && a.fma == b.fma;
}

}  // namespace


// Every Linear shape of the synthetic models (src/devtools/synthetic.cpp: presets
// tiny / small / medium of llama / qwen2 / qwen3 and of glm4_moe / deepseek_v3 /
// qwen3_moe, MTP layers and MLA's absorbed per-head matmuls included) and of the
// stories260K llama2.c test model.
std::vector<TuneShape> synthetic_shapes() {
  std::set<TuneShape> s;
  auto gqa = [&](int hidden, int heads, int kv_heads, int head_dim) {
    const int qd = heads * head_dim, kvd = kv_heads * head_dim;
    s.insert({qd, hidden});
    s.insert({kvd, hidden});
    s.insert({hidden, qd});
  };
  auto mlp = [&](int hidden, int inter) {
    s.insert({inter, hidden});
    s.insert({hidden, inter});
  };
  struct Dense { int hidden, inter, heads, kv, hd, vocab; };
  for (Dense d : {Dense{64, 160, 4, 2, 16, 320}, Dense{256, 704, 8, 4, 32, 2048},
                  Dense{896, 4864, 14, 2, 64, 151936}, Dense{64, 172, 8, 4, 8, 512}}) {
    gqa(d.hidden, d.heads, d.kv, d.hd);
    mlp(d.hidden, d.inter);
    s.insert({d.vocab, d.hidden});  // lm_head (or the tied embedding)
  }
  struct Moe { int hidden, inter, heads, kv, hd, vocab, experts, moe_inter; };
  struct Mla { int q_rank, kv_rank, nope, rope, v; };
  const Moe moes[] = {{64, 160, 4, 2, 16, 320, 8, 32}, {256, 704, 8, 4, 32, 2048, 16, 128},
                      {1024, 2816, 16, 4, 64, 32000, 64, 512}};
  const Mla mlas[] = {{64, 32, 16, 8, 16}, {128, 96, 32, 16, 32}, {384, 256, 64, 32, 64}};
  // (Tiny deepseek_v3's q_lora_rank was 48, then 64 so that MXFP4 can hold q_b_proj:
  // both are listed.)
  s.insert({48, 64});
  s.insert({4 * (16 + 8), 48});
  for (int p = 0; p < 3; ++p) {
    const Moe& m = moes[p];
    gqa(m.hidden, m.heads, m.kv, m.hd);  // glm4_moe, qwen3_moe
    mlp(m.hidden, m.inter);              // dense layers
    mlp(m.hidden, m.moe_inter);          // routed and shared experts (n_shared = 1)
    s.insert({m.experts, m.hidden});     // router
    s.insert({m.vocab, m.hidden});       // lm_head, MTP shared_head.head
    s.insert({m.hidden, 2 * m.hidden});  // MTP eh_proj
    const Mla& a = mlas[p];              // deepseek_v3
    s.insert({a.q_rank, m.hidden});
    s.insert({m.heads * (a.nope + a.rope), a.q_rank});
    s.insert({a.kv_rank + a.rope, m.hidden});
    s.insert({m.heads * (a.nope + a.v), a.kv_rank});
    s.insert({m.hidden, m.heads * a.v});
    s.insert({a.kv_rank, a.nope});  // absorbed W_UK^T per head
    s.insert({a.v, a.kv_rank});     // absorbed W_UV per head
  }
  return {s.begin(), s.end()};
}

TuneResult tune_matmul(Isa isa, DType dt, TuneShape s, ThreadPool& pool, const TuneOptions& o) {
  const double min_s = o.min_s;
  const int min_calls = o.min_calls;
  const bool g_verbose = o.verbose;
  std::vector<KernelConfig> cands = matmul_candidates(isa, dt);
  TuneResult res;
  res.cfg = cands.empty() ? KernelConfig{} : cands[0];
  res.before = res.cfg;
  if (cands.size() <= 1) return res;
  // The config in effect goes first: it is the one to beat.
  const KernelConfig* tuned = find_tuned_config("matmul", dt, s.out, s.in, isa);
  const KernelConfig cur = tuned ? *tuned : default_kernel_config("matmul", dt, isa);
  if (auto it = std::find(cands.begin(), cands.end(), cur); it != cands.end()) std::rotate(cands.begin(), it, it + 1);
  const KernelConfig def = cands[0];
  res.before = def;
  // GEMV candidates: distinct (gemv_rows, prefetch) with the default GEMM tile.
  std::vector<KernelConfig> gv, gm;
  for (const KernelConfig& c : cands) {
    if (same_gemm(c, def) &&
        std::none_of(gv.begin(), gv.end(), [&](const KernelConfig& g) { return same_gemv(g, c); }))
      gv.push_back(c);
  }
  // GEMV over copies that exceed the LLC (capped for tiny weights, which a real
  // decode keeps in cache anyway).
  const size_t bytes = dtype_bytes(dt, s.out * s.in);
  const size_t copies = std::clamp<size_t>((size_t(96) << 20) / std::max<size_t>(bytes, 1), 1, 256);
  std::vector<Weight> ws;
  for (size_t c = 0; c < copies; ++c) ws.push_back(make_weight(dt, s.out, s.in, uint32_t(c + 1)));
  const int64_t n_gemm = 64;
  std::vector<float> x(size_t(n_gemm * s.in), 0.5f), y(size_t(n_gemm * s.out));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 2654435761u % 2001) - 1000) / 1000.0f;
  size_t c = 0;
  const std::vector<double> best = time_interleaved(gv.size(), [&](size_t k) {
    matmul_with_config(isa, gv[k], y.data(), x.data(), ws[c].t.t, 1, pool);
    c = (c + 1) % ws.size();
  }, min_s, min_calls);
  if (g_verbose)
    for (size_t k = 0; k < gv.size(); ++k)
      fmt::print(stderr, "  {} {} {}x{} gemv rows {} prefetch {}: {:.1f} us\n", isa_name(isa), dtype_name(dt),
                 s.out, s.in, gv[k].gemv_rows, gv[k].prefetch, best[k] * 1e6);
  const size_t bi = pick(best);
  KernelConfig chosen = gv[bi];
  // Weight bytes actually streamed per call: data plus scales.
  const Tensor& w0 = ws[0].t.t;
  res.gemv_gbs = double(w0.storage_bytes()) / best[bi] / 1e9;
  res.gemv_gbs_before = double(w0.storage_bytes()) / best[0] / 1e9;
  // GEMM tiles with the chosen GEMV settings, warm weights.
  for (const KernelConfig& c : cands)
    if (same_gemv(c, chosen)) gm.push_back(c);
  // The config in effect's GEMM fields first (the one to beat; 64 tokens take the
  // GEMM tiles, so the GEMV fields do not change this time).
  for (size_t k = 0; k < gm.size(); ++k)
    if (same_gemm(gm[k], def)) std::rotate(gm.begin(), gm.begin() + long(k), gm.begin() + long(k) + 1);
  ws.resize(1);
  const std::vector<double> bm = time_interleaved(gm.size(), [&](size_t k) {
    matmul_with_config(isa, gm[k], y.data(), x.data(), ws[0].t.t, n_gemm, pool);
  }, min_s, min_calls);
  if (g_verbose)
    for (size_t k = 0; k < gm.size(); ++k)
      fmt::print(stderr, "  {} {} {}x{} gemm {}x{}{} blocking {}/{} KiB: {:.1f} us\n", isa_name(isa), dtype_name(dt),
                 s.out, s.in, gm[k].tile_tokens, gm[k].tile_rows, gm[k].fma ? " fma" : "", gm[k].chunk_kib,
                 gm[k].rowblock_kib, bm[k] * 1e6);
  const size_t mi = pick(bm);
  res.cfg = gm[mi];
  const double flops = 2.0 * double(s.out) * double(s.in) * double(n_gemm);
  res.gemm_gflops = flops / bm[mi] / 1e9;
  res.gemm_gflops_before = flops / bm[0] / 1e9;
  return res;
}


std::vector<TunedEntry> tune_entries(const std::vector<Isa>& isas, const std::vector<DType>& dtypes,
                                     const std::vector<TuneShape>& shapes, bool with_defaults, ThreadPool& pool,
                                     const TuneOptions& opts, const std::string& cpu) {
  std::vector<TunedEntry> out;
  for (Isa isa : isas)
    for (DType dt : dtypes) {
      if ((dt == DType::BF16 || dt == DType::F8_E4M3) && matmul_amx(isa)) {
        // One kernel, no tiles to choose; entries written now would later be read by the
        // AVX-512 kernels (MXSERVE_AMX=0), which they were not measured on.
        fmt::print(stderr, "tune: {} {}: runs on AMX tiles (nothing to tune; MXSERVE_AMX=0 tunes the AVX-512 kernels), skipped\n",
                   isa_name(isa), dtype_name(dt));
        continue;
      }
      const std::vector<KernelConfig> cands = matmul_candidates(isa, dt);
      if (cands.empty()) {
        fmt::print(stderr, "tune: {} {}: not available on this CPU, skipped\n", isa_name(isa), dtype_name(dt));
        continue;
      }
      if (with_defaults) out.push_back({"matmul", dt, 0, 0, isa, cands[0], "", cpu});
      for (TuneShape s : shapes) {
        if (dt == DType::MXFP4 && s.in % 32) continue;  // not representable
        const TuneResult r = tune_matmul(isa, dt, s, pool, opts);
        std::string note = cands.size() > 1
                               ? fmt::format("gemv {:.1f} GB/s, gemm64 {:.0f} GFLOP/s", r.gemv_gbs, r.gemm_gflops)
                               : "";
        if (note.empty()) {
          fmt::print(stderr, "tune: {} {} [out={}, in={}]: default (nothing to tune)\n", isa_name(isa),
                     dtype_name(dt), s.out, s.in);
        } else {
          auto pct = [](double now, double was) { return was > 0 ? (now / was - 1) * 100 : 0.0; };
          fmt::print(stderr,
                     "tune: {} {} [out={}, in={}]: gemv {:.1f} -> {:.1f} GB/s ({:+.0f}%), gemm64 {:.0f} -> {:.0f} "
                     "GFLOP/s ({:+.0f}%){}\n",
                     isa_name(isa), dtype_name(dt), s.out, s.in, r.gemv_gbs_before, r.gemv_gbs,
                     pct(r.gemv_gbs, r.gemv_gbs_before), r.gemm_gflops_before, r.gemm_gflops,
                     pct(r.gemm_gflops, r.gemm_gflops_before), r.cfg == r.before ? " (config kept)" : "");
        }
        out.push_back({"matmul", dt, s.out, s.in, isa, r.cfg, note, cpu});
      }
    }
  return out;
}

std::optional<TunedEntry> tune_attention(ThreadPool& pool, const TuneOptions& o, const std::string& cpu) {
  if (!attention_bf16_supported(Isa::Avx512) || !attention_bf16_fma_supported()) {
    fmt::print(stderr, "tune: attention bf16 products: {}, skipped\n",
               attention_bf16_supported(Isa::Avx512) ? "vdpbf16ps is not two FMAs on this CPU" : "no AVX512-BF16");
    return std::nullopt;
  }
  // A prefill chunk's last 64 queries over 1024 positions of a BF16 cache: 16 heads
  // over 4 KV heads of 128 (a real model's head size), blocks of 16.
  const int H = 16, G = 4, hd = 128, ctx = 1024, n_q = 64, bs = 16, blocks = ctx / bs;
  // The cache's keys and values as BF16 "weights" of [ctx, G hd] (its layout), the queries as F32 ones.
  const Weight k = make_weight(DType::BF16, ctx, G * hd, 7), v = make_weight(DType::BF16, ctx, G * hd, 8);
  const Weight q = make_weight(DType::F32, n_q, H * hd, 9);
  std::vector<float> out(size_t(n_q) * H * hd);
  std::vector<int32_t> table(blocks), seq(n_q, 0), pos(n_q);
  for (int b = 0; b < blocks; ++b) table[b] = b;
  for (int i = 0; i < n_q; ++i) pos[i] = ctx - n_q + i;
  const PagedKV kv{k.t.t.data, v.t.t.data, G * hd, G * hd, bs, DType::BF16};
  const AttnArgs args{H, G, hd, 0.088f};
  AttnScratch scratch;
  // The table's choice first: the one to beat.
  const KernelConfig* tuned = find_tuned_config("attention", DType::BF16, 0, 0, Isa::Avx512);
  const bool cur = tuned && tuned->fma;
  const bool cands[2] = {cur, !cur};
  const bool was = attention_bf16_fma();
  const std::vector<double> t = time_interleaved(2, [&](size_t c) {
    set_attention_bf16_fma(cands[c]);
    cpu_paged_attention(Isa::Avx512, AttnProducts::Bf16, out.data(), q.t.t.as<float>(), H * hd, kv, args,
                        table.data(), blocks, seq.data(), pos.data(), n_q, pool, scratch);
  }, o.min_s, o.min_calls);
  set_attention_bf16_fma(was);
  double flops = 0;
  for (int i = 0; i < n_q; ++i) flops += 4.0 * hd * H * (pos[i] + 1);
  const double gf[2] = {flops / t[cands[0] ? 1 : 0] / 1e9, flops / t[cands[0] ? 0 : 1] / 1e9};  // [vdpbf16ps, FMAs]
  TunedEntry e{"attention", DType::BF16, 0, 0, Isa::Avx512, KernelConfig{}, "", cpu};
  e.cfg.fma = cands[pick(t)];
  e.note = fmt::format("prefill chunk: vdpbf16ps {:.0f}, FMAs {:.0f} GFLOP/s", gf[0], gf[1]);
  fmt::print(stderr, "tune: attention bf16 products: vdpbf16ps {:.1f} GFLOP/s, on FMAs {:.1f} GFLOP/s: {}{}\n", gf[0],
             gf[1], e.cfg.fma ? "FMAs" : "vdpbf16ps", e.cfg.fma == cur ? " (kept)" : "");
  return e;
}

}  // namespace mx
