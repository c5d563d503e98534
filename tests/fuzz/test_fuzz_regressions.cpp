// Replays every fuzz target's seed corpus (fuzz/corpus/<target>/) and every
// input a fuzzer ever crashed on (tests/data/fuzz-regressions/<target>/, kept
// after the fix) through the target's body, in every build: a regression
// aborts or trips a sanitizer here, not only in a fuzzing run.
#include <gtest/gtest.h>

#include "fuzz_common.h"
#include "test_util.h"

using namespace mxtest;

namespace {

std::vector<fs::path> inputs_of(const fs::path& dir) {
  std::vector<fs::path> v;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().filename().string()[0] != '.') v.push_back(e.path());
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST(FuzzRegressions, EveryTargetHasASeedCorpus) {
  ASSERT_GE(mxfuzz::targets().size(), 7u);
  for (const auto& [name, fn] : mxfuzz::targets())
    EXPECT_FALSE(inputs_of(source_dir() / "fuzz" / "corpus" / name).empty()) << name;
}

TEST(FuzzRegressions, CorporaAndKeptCrashesRunClean) {
  size_t n = 0;
  for (const auto& [name, fn] : mxfuzz::targets())
    for (const fs::path& dir : {source_dir() / "fuzz" / "corpus" / name, source_dir() / "tests" / "data" / "fuzz-regressions" / name})
      for (const fs::path& f : inputs_of(dir)) {
        SCOPED_TRACE(f.string());
        const std::string bytes = slurp(f);
        fn(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
        ++n;
      }
  EXPECT_GT(n, 30u);
}
