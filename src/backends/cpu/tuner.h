#pragma once
// Kernel tuner: times every config the matmul kernels implement
// (matmul_candidates) for one (isa, dtype, shape) and picks the fastest.
//
// It picks the GEMV config (rows per tile, prefetch distance) by 1-token time
// over enough weight copies to miss the last-level cache, as decode does, then
// the GEMM tile (tokens x rows) by 64-token time on cache-warm weights. Calls
// are timed one by one, candidates interleaved call by call, and each
// candidate's lower quartile counts; the config in effect now (the registry's
// entry for this machine, else the generic default) wins unless beaten by 3%.
// So a busy machine skews the choice less (it still skews the GB/s and GFLOP/s
// reported), and the result says what it improved over that config. Scalar
// kernels have nothing to tune: they get the default.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "backends/registry.h"

namespace mx {

struct TuneShape {
  int64_t out, in;
  bool operator<(const TuneShape& o) const { return out != o.out ? out < o.out : in < o.in; }
};

struct TuneOptions {
  double min_s = 0.01;  // per candidate set: time at least this long ...
  int min_calls = 15;   // ... and this many calls per candidate
  bool verbose = false; // every candidate's time on stderr
};

struct TuneResult {
  KernelConfig cfg;
  double gemv_gbs = 0, gemm_gflops = 0;
  // The same figures for the config in effect before tuning.
  KernelConfig before;
  double gemv_gbs_before = 0, gemm_gflops_before = 0;
};

TuneResult tune_matmul(Isa isa, DType dtype, TuneShape shape, ThreadPool& pool, const TuneOptions& opts);

// Every Linear shape of the synthetic models (all presets and families, MTP
// and MLA's absorbed matmuls included) and of stories260K: the committed table.
std::vector<TuneShape> synthetic_shapes();

}  // namespace mx

namespace mx {

// Tunes every (isa, dtype, shape) combination that exists (ISAs this CPU lacks
// and shapes a dtype cannot hold are skipped, with a line on stderr), plus,
// when with_defaults, one generic-default entry per (isa, dtype). Progress on
// stderr: each shape's figures before and after. cpu: the entries' machine key
// (cpu_key() for this machine only, "" for any CPU with the ISA).
std::vector<TunedEntry> tune_entries(const std::vector<Isa>& isas, const std::vector<DType>& dtypes,
                                     const std::vector<TuneShape>& shapes, bool with_defaults, ThreadPool& pool,
                                     const TuneOptions& opts, const std::string& cpu);

// Times attention's bf16 products (AVX512-BF16) on vdpbf16ps and on FMAs (the
// same bits, attention.h) over a prefill chunk, and returns the "attention" entry
// that picks the faster (the table's choice now wins unless beaten by 3%); none,
// with a line on stderr, where the FMA path does not exist.
std::optional<TunedEntry> tune_attention(ThreadPool& pool, const TuneOptions& opts, const std::string& cpu);

}  // namespace mx
