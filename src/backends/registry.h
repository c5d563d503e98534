#pragma once
// Tuned-kernel registry: (op, weight dtype, out, in, isa) -> the tile shapes and
// prefetch distance a kernel runs with. (Op "attention" is the exception: one entry
// per machine, no shape and no tile fields; its `fma` says whether attention's bf16
// products run their prefill tiles on FMAs, backends/cpu/attention.h.) Entries come from a committed JSON table
// (backends/cpu/tuned_configs.json, compiled into the binary; written by
// `mxserve tune --model M` or `mxserve tune --synthetic`) covering the synthetic
// models' shapes, plus one generic default per (op, dtype, isa) (an entry with
// out = in = 0). Files named by --kernel-configs / MXSERVE_KERNEL_CONFIGS
// (':'-separated) are read on top of it; their entries replace the same keys.
//
// Entries are per machine where measured so: an entry with "cpu" set (cpu_key(),
// e.g. "amd-f26-m2") applies only on that vendor / family / model, and is
// preferred there over the entry without one (any CPU with that ISA), which stays
// the fallback. Kernels run alike on every machine of an ISA; the best tile and
// prefetch distance do not (L2 size, load ports, memory latency differ).
//
// A config only regroups the outputs a kernel computes at once and where it
// prefetches; it never changes any output's arithmetic (matmul_impl.h), so the
// batch-invariance contract holds whichever config a shape gets.
//
// Looking up a shape that is not in the table falls back to the generic default:
// one warning per distinct key on stderr, kernel_fallback_count() and the key's
// entry in untuned_shapes() count every such call, and in strict mode
// (set_strict_kernels, the CLI's --strict-kernels) the call throws mx::Error
// naming the shape instead. Lookups are cached per thread (lock-free after the
// first call for a key), so the matmul paths consult the registry on every call.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"

namespace mx {

struct KernelConfig {
  int gemv_rows = 8;    // weight rows per decode (GEMV) tile, which streams each row once
  int tile_tokens = 4;  // GEMM tile: tokens ...
  int tile_rows = 6;    //   ... x weight rows, computed together (accumulators in registers where they fit)
  // GEMV software prefetch distance in bytes (0: none): ahead on each row in the tiles
  // that read rows side by side; ahead in the one stream of AVX2's MXFP4 GEMV, which
  // reads its rows one after another; on AVX2's float GEMV a distance of a whole row
  // or more prefetches the next tile in address order (matmul_avx2.cpp).
  int prefetch = 1024;
  // GEMM cache blocking: tokens go in chunks of ~chunk_kib KiB of activations (as the
  // tile reads them: f32, int8 + scales, bf16, or f32 widened from bf16), and
  // (rowblock_kib > 0) rows in blocks of ~rowblock_kib KiB of weights that stay in
  // L2 while the chunks pass; 0: each chunk streams all of a thread's rows.
  int chunk_kib = 256;
  int rowblock_kib = 0;
  // BF16 / F8_E4M3 weights with bf16 activations: the GEMM tile does vdpbf16ps's
  // products on f32 FMAs (rows widened once per chunk), for CPUs where that
  // instruction is the slower (measured on an Intel Xeon). Offered only where the two
  // give the same bits (bf16_fma_avx512.h); elsewhere the same shape runs. For op
  // "attention": its prefill tiles do the same (attention.h).
  bool fma = false;
  bool operator==(const KernelConfig&) const = default;
};

// One table entry. out == in == 0: the generic default of (op, dtype, isa).
struct TunedEntry {
  std::string op;
  DType dtype;
  int64_t out, in;
  Isa isa;
  KernelConfig cfg;
  std::string note;  // e.g. the measured GB/s, for people reading the file
  std::string cpu;   // cpu_key() of the machine it is for; "" = any CPU with this ISA
};

// The table in effect: the committed one, then the extra files.
std::span<const TunedEntry> tuned_table();

// Extra config files, read when the registry is first used; set them before
// any kernel runs (throws mx::Error if the registry is already built).
void set_kernel_config_files(std::vector<std::string> paths);

// The JSON format (backends/cpu/tuned_configs.json). parse throws mx::Error
// naming `origin` and the bad entry; write emits one entry per line.
// about (optional): receives the file's "about" text, if it has one.
std::vector<TunedEntry> parse_kernel_configs(std::string_view json, const std::string& origin,
                                             std::string* about = nullptr);
std::vector<TunedEntry> load_kernel_configs(const std::string& path, std::string* about = nullptr);
// Weight dtype names in config files: the safetensors spellings plus "MXFP4".
std::optional<DType> kernel_dtype_from_name(std::string_view name);
std::string write_kernel_configs(const std::vector<TunedEntry>& entries, const std::string& about);
// Entries of `base` with those of `over` replacing equal keys, sorted by (op, isa, dtype, out, in, cpu).
std::vector<TunedEntry> merge_kernel_configs(std::vector<TunedEntry> base, const std::vector<TunedEntry>& over);

// The config to run (op, dtype, out, in) with on isa. Untuned shapes: see above.
const KernelConfig& kernel_config(std::string_view op, DType dtype, int64_t out, int64_t in,
                                  Isa isa);

// Pure queries, no warning or counting: the table's entry for exactly this shape
// on this machine (its cpu_key()'s entry, else the ISA's; nullptr if none), and the
// generic default used for shapes not in the table.
const KernelConfig* find_tuned_config(std::string_view op, DType dtype, int64_t out, int64_t in,
                                      Isa isa);
KernelConfig default_kernel_config(std::string_view op, DType dtype, Isa isa);
// The lookup rule on a given table and machine key: cpu's entry, else the one
// without a cpu, else nullptr.
const KernelConfig* find_kernel_config(std::span<const TunedEntry> table, std::string_view cpu, std::string_view op,
                                       DType dtype, int64_t out, int64_t in, Isa isa);

void set_strict_kernels(bool strict);
bool strict_kernels();

// Calls that ran (or, in strict mode, refused to run) with an untuned shape.
uint64_t kernel_fallback_count();

struct KernelShape {
  std::string op;
  DType dtype;
  int64_t out, in;
  Isa isa;
  uint64_t calls;    // fallback lookups of this key so far (0 for tuned keys)
  std::string str() const;  // "matmul MXFP4 [out=896, in=4864] avx512"
};
using UntunedShape = KernelShape;
// Every distinct untuned key looked up so far, in first-seen order (for /metrics).
std::vector<UntunedShape> untuned_shapes();
// Every distinct key looked up so far, tuned or not (what `mxserve tune --model` tunes).
std::vector<KernelShape> seen_kernel_shapes();

}  // namespace mx
