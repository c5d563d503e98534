// mxserve tune: measure kernel configs for a model's shapes (or the synthetic
// models' set) and write them as a kernel config file (backends/registry.h).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <fstream>
#include <set>

#include "cli/commands.h"
#include "cli/list_arg.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/generate.h"
#include "backends/cpu/matmul.h"
#include "backends/cpu/tuner.h"
#include "backends/registry.h"
#include "models/model.h"

namespace mx::cli {

namespace {

struct TuneArgs {
  std::string model, out, shapes, dtypes, isas;
  bool synthetic = false, defaults = false, replace = false, verbose = false, any_cpu = false;
  int threads = 0;
  double min_ms = 10;
  TuneOptions opts;
};

// The (dtype, out, in) of every matmul the model runs: one short prefill and a
// decode step, with the registry recording each key it is asked for.
std::set<std::pair<DType, TuneShape>> model_shapes(const std::string& path) {
  auto m = load_model(path);
  GenerateOptions o;
  o.max_tokens = 2;
  o.sampling.temperature = 0;
  o.ignore_eos = true;
  generate(*m, {1, 2, 3, 4, 5, 6, 7, 8}, o);
  std::set<std::pair<DType, TuneShape>> s;
  for (const KernelShape& k : seen_kernel_shapes())
    if (k.op == "matmul") s.insert({k.dtype, {k.out, k.in}});
  return s;
}

}  // namespace

Command add_tune(CLI::App& app) {
  auto* s = app.add_subcommand("tune",
                               "Measure kernel configs for a model's matmul shapes (and attention's bf16 products) and "
                               "write a kernel config file");
  auto a = std::make_shared<TuneArgs>();
  auto* src = s->add_option("--model", a->model, "Tune every matmul shape and dtype this model runs");
  s->add_flag("--synthetic", a->synthetic, "Tune the committed table's shape set (all synthetic presets + stories260K)")
      ->excludes(src);
  s->add_option("--out", a->out, "Kernel config file to write (existing entries are kept unless --replace)")
      ->required();
  s->add_option("--shapes", a->shapes, "Only these shapes, OUTxIN,... (with --synthetic)");
  s->add_option("--dtypes", a->dtypes, "Weight dtypes, e.g. BF16,MXFP4 (--synthetic: default all; --model: the model's)");
  s->add_option("--isas", a->isas, "ISAs to tune: scalar,avx2,avx512 (default: every one this CPU has)");
  s->add_flag("--defaults", a->defaults, "Also write the generic default entry of each (isa, dtype)");
  s->add_flag("--replace", a->replace, "Overwrite --out instead of merging into it");
  s->add_flag("--any-cpu", a->any_cpu,
              "Write entries for any CPU with the ISA (the committed table's fallback) instead of for this "
              "machine's vendor / family / model only");
  s->add_option("--min-ms", a->min_ms, "Milliseconds of timing per candidate set")
      ->check(CLI::Range(0.1, 60000.0))
      ->capture_default_str();
  s->add_option("--calls", a->opts.min_calls, "Timed calls per candidate, at least")->check(CLI::Range(1, 100000));
  s->add_flag("--verbose", a->opts.verbose, "Every candidate's time on stderr");
  s->add_option("--threads", a->threads, "Worker threads (default: all cores)")->check(CLI::Range(1, 1024));
  return {s, [a] {
            MX_CHECK(!a->model.empty() || a->synthetic, "tune: give --model M or --synthetic");
            if (a->threads) set_global_threads(a->threads);
            a->opts.min_s = a->min_ms / 1000.0;
            std::vector<Isa> isas;
            for (const std::string& t : split_list(a->isas)) {
              const auto i = isa_from_name(t);
              MX_CHECK(i, "tune: unknown isa '{}' (scalar, avx2, avx512)", t);
              isas.push_back(*i);
            }
            if (isas.empty())
              for (Isa i : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
                if (i <= best_isa()) isas.push_back(i);
            std::vector<DType> dtypes;
            for (const std::string& t : split_list(a->dtypes)) {
              const auto d = kernel_dtype_from_name(t);
              MX_CHECK(d, "tune: unknown dtype '{}'", t);
              dtypes.push_back(*d);
            }
            std::vector<TunedEntry> entries;
            ThreadPool& pool = global_pool();
            const std::string cpu = a->any_cpu ? "" : cpu_key();
            fmt::print(stderr, "tune: CPU {} ({}), entries for {}\n", cpu_model_name(), cpu_key(),
                       cpu.empty() ? "any CPU with the ISA" : "this machine's key " + cpu);
            if (a->synthetic) {
              std::vector<TuneShape> shapes = synthetic_shapes();
              if (!a->shapes.empty()) {
                shapes.clear();
                for (const std::string& t : split_list(a->shapes)) {
                  long long o = 0, n = 0;
                  char tail = 0;
                  MX_CHECK(std::sscanf(t.c_str(), "%lldx%lld%c", &o, &n, &tail) == 2 && o > 0 && n > 0,
                           "tune: bad shape '{}' (OUTxIN)", t);
                  // The weight is made in memory: at most 2^30 elements (4 GiB in f32), which holds the
                  // largest real layers (Llama 3.1 405B's MLP 53248 x 16384 and DeepSeek-V3's lm_head
                  // 129280 x 7168 are 2^29.7 and 2^29.8); 10^18 ended in bad_alloc.
                  MX_CHECK(o <= (1LL << 30) / n, "tune: shape '{}' holds {} elements, over 2^30", t, double(o) * n);
                  const bool mxfp4 = dtypes.empty() || std::count(dtypes.begin(), dtypes.end(), DType::MXFP4);
                  MX_CHECK(!mxfp4 || n % 32 == 0, "tune: shape '{}': MXFP4 needs IN a multiple of 32 (its blocks)", t);
                  shapes.push_back({o, n});
                }
              }
              if (dtypes.empty()) dtypes = {DType::F32, DType::BF16, DType::MXFP4, DType::F8_E4M3};
              entries = tune_entries(isas, dtypes, shapes, a->defaults, pool, a->opts, cpu);
            } else {
              // Per dtype the model uses, its shapes.
              std::map<DType, std::vector<TuneShape>> by_dtype;
              for (const auto& [dt, sh] : model_shapes(a->model))
                if (dtypes.empty() || std::find(dtypes.begin(), dtypes.end(), dt) != dtypes.end())
                  by_dtype[dt].push_back(sh);
              MX_CHECK(!by_dtype.empty(), "tune: {} runs no matmul of the requested dtypes", a->model);
              for (const auto& [dt, shapes] : by_dtype) {
                auto e = tune_entries(isas, {dt}, shapes, a->defaults, pool, a->opts, cpu);
                entries.insert(entries.end(), e.begin(), e.end());
              }
            }
            // Attention's bf16 products (BF16 and FP8 caches): with the AVX-512 kernels, unless
            // --dtypes names neither. Always for this machine's key, even with --any-cpu: which
            // instruction is faster differs between CPUs of the same ISA (Intel Xeon, AMD Zen).
            auto listed = [&](DType d) { return std::find(dtypes.begin(), dtypes.end(), d) != dtypes.end(); };
            const bool bf16 = a->dtypes.empty() || listed(DType::BF16) || listed(DType::F8_E4M3);
            if (bf16 && std::find(isas.begin(), isas.end(), Isa::Avx512) != isas.end())
              if (auto e = tune_attention(pool, a->opts, cpu_key())) entries.push_back(*e);
            std::vector<TunedEntry> base;
            std::string about = fmt::format("Written by mxserve tune ({} threads, CPU {} ({}), {}; AMX {}).",
                                            pool.size(), cpu_model_name(), cpu_key(), cpu_features_string(),
                                            matmul_amx_status());
            if (!a->replace && std::filesystem::exists(a->out)) base = load_kernel_configs(a->out, &about);
            const auto merged = merge_kernel_configs(std::move(base), entries);
            std::ofstream f(a->out, std::ios::binary | std::ios::trunc);
            MX_CHECK(f.good(), "tune: cannot write {}", a->out);
            f << write_kernel_configs(merged, about);
            MX_CHECK(f.good(), "tune: error writing {}", a->out);
            fmt::print(stderr, "tune: wrote {} entries ({} measured now) to {}\n", merged.size(), entries.size(), a->out);
            return 0;
          }};
}

}  // namespace mx::cli
