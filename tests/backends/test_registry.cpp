// Tuned-kernel registry: the committed table's entries are found and valid, the
// synthetic models' medium shapes are covered, and an untuned shape warns once,
// counts every call, and throws under strict mode.
#include "backends/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "backends/cpu/matmul.h"

namespace {

using namespace mx;

struct StrictGuard {
  explicit StrictGuard(bool on) : was(strict_kernels()) { set_strict_kernels(on); }
  ~StrictGuard() { set_strict_kernels(was); }
  bool was;
};

bool isa_ok(Isa isa) {
  const CpuFeatures& f = cpu_features();
  return isa == Isa::Scalar || (isa == Isa::Avx2 && f.avx2 && f.fma) ||
         (isa == Isa::Avx512 && f.avx512f && f.avx512bw && f.avx512vl);
}

TEST(Registry, TableEntriesAreUniqueAndImplemented) {
  std::set<std::tuple<std::string, int, int64_t, int64_t, int, std::string>> seen;
  size_t shaped = 0;
  for (const TunedEntry& e : tuned_table()) {
    EXPECT_TRUE(seen.insert({e.op, int(e.dtype), e.out, e.in, int(e.isa), e.cpu}).second)
        << "duplicate " << e.op << " " << dtype_name(e.dtype) << " " << e.out << "x" << e.in;
    shaped += e.out != 0;
    if (e.op == "attention") {  // where attention's bf16 products run: per machine, no shape
      EXPECT_TRUE(e.out == 0 && e.in == 0 && e.dtype == DType::BF16 && e.isa == Isa::Avx512 && !e.cpu.empty())
          << "attention entry for " << e.cpu;
      continue;
    }
    if (!isa_ok(e.isa)) continue;
    // Every entry names tile shapes the kernels implement (else it would silently
    // run the kernel's default).
    const std::vector<KernelConfig> cands = matmul_candidates(e.isa, e.dtype);
    ASSERT_FALSE(cands.empty()) << dtype_name(e.dtype) << " " << isa_name(e.isa);
    if (cands.size() == 1) continue;  // nothing tunable (scalar)
    const bool found = std::any_of(cands.begin(), cands.end(), [&](const KernelConfig& c) {
      return c.gemv_rows == e.cfg.gemv_rows && c.tile_tokens == e.cfg.tile_tokens &&
             c.tile_rows == e.cfg.tile_rows;
    });
    EXPECT_TRUE(found) << dtype_name(e.dtype) << " " << e.out << "x" << e.in << " " << isa_name(e.isa);
  }
  EXPECT_GT(shaped, 100u);
}

TEST(Registry, TunedShapeFound) {
  const uint64_t before = kernel_fallback_count();
  // Medium synthetic shapes (llama/qwen3 medium, MoE medium), every dtype, every ISA.
  const std::pair<int64_t, int64_t> shapes[] = {{4864, 896}, {896, 4864}, {896, 896}, {128, 896},
                                                {151936, 896}, {2816, 1024}, {1024, 2816},
                                                {512, 1024}, {1024, 512}, {32000, 1024}};
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    for (DType dt : {DType::F32, DType::BF16, DType::MXFP4, DType::F8_E4M3})
      for (auto [out, in] : shapes) {
        const KernelConfig* c = find_tuned_config("matmul", dt, out, in, isa);
        ASSERT_NE(c, nullptr) << dtype_name(dt) << " " << out << "x" << in << " " << isa_name(isa);
        EXPECT_EQ(kernel_config("matmul", dt, out, in, isa), *c);
      }
  // Strict mode accepts tuned shapes.
  StrictGuard strict(true);
  EXPECT_NO_THROW(kernel_config("matmul", DType::BF16, 4864, 896, best_isa()));
  EXPECT_EQ(kernel_fallback_count(), before);
}

TEST(Registry, UntunedShapeWarnsOnceCountsAndThrowsWhenStrict) {
  StrictGuard off(false);
  const int64_t out = 12347, in = 777;
  const uint64_t before = kernel_fallback_count();
  testing::internal::CaptureStderr();
  const KernelConfig c1 = kernel_config("matmul", DType::BF16, out, in, Isa::Avx512);
  const KernelConfig c2 = kernel_config("matmul", DType::BF16, out, in, Isa::Avx512);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(c1, c2);
  EXPECT_EQ(c1, default_kernel_config("matmul", DType::BF16, Isa::Avx512));
  EXPECT_EQ(kernel_fallback_count(), before + 2);
  // One warning, naming the shape.
  size_t n = 0;
  for (size_t p = err.find("warning"); p != std::string::npos; p = err.find("warning", p + 1)) ++n;
  EXPECT_EQ(n, 1u) << err;
  EXPECT_NE(err.find("out=12347, in=777"), std::string::npos) << err;
  EXPECT_EQ(find_tuned_config("matmul", DType::BF16, out, in, Isa::Avx512), nullptr);

  const std::vector<UntunedShape> u = untuned_shapes();
  auto it = std::find_if(u.begin(), u.end(), [&](const UntunedShape& s) {
    return s.out == out && s.in == in && s.dtype == DType::BF16 && s.isa == Isa::Avx512;
  });
  ASSERT_NE(it, u.end());
  EXPECT_EQ(it->calls, 2u);
  EXPECT_NE(it->str().find("BF16"), std::string::npos);

  // Strict: the same lookup (now cached) and a fresh one both throw, naming the shape.
  set_strict_kernels(true);
  try {
    kernel_config("matmul", DType::BF16, out, in, Isa::Avx512);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out=12347, in=777"), std::string::npos) << e.what();
  }
  testing::internal::CaptureStderr();
  EXPECT_THROW(kernel_config("matmul", DType::MXFP4, 12349, 64, Isa::Scalar), Error);
  testing::internal::GetCapturedStderr();
  // matmul itself refuses to run an untuned shape.
  std::vector<float> w(3 * 5, 0.5f), x(5, 1.0f), y(3);
  ThreadPool pool(1);
  testing::internal::CaptureStderr();
  EXPECT_THROW(matmul(y.data(), x.data(), Tensor(DType::F32, {3, 5}, w.data()), 1, pool), Error);
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(kernel_fallback_count(), before + 5);
  set_strict_kernels(false);
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(matmul(y.data(), x.data(), Tensor(DType::F32, {3, 5}, w.data()), 1, pool));
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(y[0], 2.5f);
}

}  // namespace

namespace {
const char* kOneEntry = R"({"format": "mxserve-kernel-configs", "version": 1, "entries": [
  {"op": "matmul", "dtype": "BF16", "out": 640, "in": 320, "isa": "avx2", "gemv_rows": 4, "tile_tokens": 4,
   "tile_rows": 6, "prefetch": 0, "chunk_kib": 128, "rowblock_kib": 0, "note": "x"}]})";
}  // namespace

TEST(KernelConfigs, JsonRoundTripsAndMergesByKey) {
  auto e = parse_kernel_configs(kOneEntry, "test");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].dtype, DType::BF16);
  EXPECT_EQ(e[0].isa, Isa::Avx2);
  EXPECT_EQ(e[0].cfg.gemv_rows, 4);
  EXPECT_EQ(e[0].note, "x");
  auto again = parse_kernel_configs(write_kernel_configs(e, "about"), "written");
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].cfg, e[0].cfg);
  EXPECT_EQ(again[0].out, 640);
  // The committed table round-trips too.
  std::vector<TunedEntry> table(tuned_table().begin(), tuned_table().end());
  EXPECT_EQ(parse_kernel_configs(write_kernel_configs(table, "a"), "t").size(), table.size());
  // Merging replaces the same key and adds new ones.
  TunedEntry changed = e[0];
  changed.cfg.gemv_rows = 8;
  TunedEntry other = e[0];
  other.out = 1280;
  auto merged = merge_kernel_configs(e, {changed, other});
  ASSERT_EQ(merged.size(), 2u);
  EXPECT_EQ(merged[0].cfg.gemv_rows, 8);
  EXPECT_EQ(merged[1].out, 1280);
}

// An entry measured on one machine (vendor / family / model) applies there, and
// only there, ahead of the ISA's entry; it round-trips through the file format.
TEST(KernelConfigs, MachineEntriesWinOnTheirMachineOnly) {
  auto e = parse_kernel_configs(kOneEntry, "test");
  TunedEntry mine = e[0];
  mine.cpu = "amd-f26-m2";
  mine.cfg.gemv_rows = 8;
  const auto table = merge_kernel_configs(e, {mine});
  ASSERT_EQ(table.size(), 2u);
  const auto again = parse_kernel_configs(write_kernel_configs(table, "a"), "t");
  ASSERT_EQ(again.size(), 2u);
  auto find = [&](std::string_view cpu) {
    return find_kernel_config(again, cpu, "matmul", DType::BF16, 640, 320, Isa::Avx2);
  };
  ASSERT_NE(find("amd-f26-m2"), nullptr);
  EXPECT_EQ(find("amd-f26-m2")->gemv_rows, 8);
  ASSERT_NE(find("intel-f6-m143"), nullptr);
  EXPECT_EQ(find("intel-f6-m143")->gemv_rows, 4);
  EXPECT_EQ(find_kernel_config(again, "amd-f26-m2", "matmul", DType::BF16, 640, 321, Isa::Avx2), nullptr);
  // Without the ISA's entry, another machine has none.
  EXPECT_EQ(find_kernel_config(std::vector<TunedEntry>{mine}, "intel-f6-m143", "matmul", DType::BF16, 640, 320,
                               Isa::Avx2),
            nullptr);
  EXPECT_FALSE(cpu_key().empty());
  EXPECT_FALSE(cpu_model_name().empty());
}

// Attention's entry says only where its bf16 products run: no tile fields, written
// or read, and no shape.
TEST(KernelConfigs, AttentionEntriesHoldOnlyTheirChoice) {
  const std::string text = R"({"format": "mxserve-kernel-configs", "version": 1, "entries": [
    {"op": "attention", "dtype": "BF16", "out": 0, "in": 0, "isa": "avx512", "fma": true, "cpu": "intel-f6-m207"}]})";
  const auto e = parse_kernel_configs(text, "a.json");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_TRUE(e[0].cfg.fma);
  const std::string written = write_kernel_configs(e, "a");
  EXPECT_EQ(written.find("gemv_rows"), std::string::npos) << written;
  const auto again = parse_kernel_configs(written, "b.json");
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].cfg, e[0].cfg);
  const KernelConfig* c = find_kernel_config(again, "intel-f6-m207", "attention", DType::BF16, 0, 0, Isa::Avx512);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->fma);
  EXPECT_EQ(find_kernel_config(again, "amd-f26-m2", "attention", DType::BF16, 0, 0, Isa::Avx512), nullptr);
  std::string shaped = text;
  const std::string zero = "\"out\": 0, \"in\": 0";
  shaped.replace(shaped.find(zero), zero.size(), "\"out\": 64, \"in\": 64");
  try {
    parse_kernel_configs(shaped, "c.json");
    ADD_FAILURE() << "accepted: " << shaped;
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("attention entry has no shape"), std::string::npos) << err.what();
  }
}

TEST(KernelConfigs, BadFilesAreClearErrors) {
  auto expect_error = [](const std::string& text, const char* needle) {
    try {
      parse_kernel_configs(text, "f.json");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error("{", "not valid JSON");
  expect_error(R"({"format": "other", "version": 1, "entries": []})", "not an mxserve kernel config");
  expect_error(R"({"format": "mxserve-kernel-configs", "version": 2, "entries": []})", "version");
  std::string s = kOneEntry;
  expect_error(std::string(s).replace(s.find("avx2"), 4, "neon"), "unknown isa");
  expect_error(std::string(s).replace(s.find("BF16"), 4, "Q4_K"), "unknown dtype");
  expect_error(std::string(s).replace(s.find("\"gemv_rows\": 4"), 14, "\"gemv_rows\": 0"), "out of range");
  expect_error(std::string(s).replace(s.find("\"prefetch\": 0, "), 15, ""), "entry 0");
  // Integers as written: these were taken as 8, 3 and 1.
  for (const char* v : {"4294967304", "3.9", "true"})
    expect_error(std::string(s).replace(s.find("\"gemv_rows\": 4"), 14, std::string("\"gemv_rows\": ") + v),
                 "'gemv_rows' must be an integer");
  tuned_table();
  EXPECT_THROW(set_kernel_config_files({"late.json"}), Error);  // the registry is already built
}
