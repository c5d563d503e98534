// mxserve on a CPU without AVX-512: QEMU's user-mode CPU ("-cpu max" under TCG: AVX2,
// FMA and F16C, no AVX-512), as AVX2-only machines (AMD Zen 2 / 3, Intel client CPUs)
// run it. Nothing compiled for AVX-512 or AMX may run there, not even while the kernel
// sets are built at start-up (a builder compiled for AVX-512 may use its instructions
// anywhere, as the AMX status did once); and stories260K's greedy ids are still
// llama2.c's.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

#if defined(__SANITIZE_ADDRESS__)
#define MX_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MX_TEST_ASAN 1
#endif
#endif

TEST(Cli, RunsOnACpuWithoutAvx512) {
#ifdef MX_TEST_ASAN
  // ASan's shadow memory (terabytes of address space reserved at start) is more than
  // qemu-user's guest address space holds: the emulated binary is killed. The release
  // build runs this test.
  GTEST_SKIP() << "an AddressSanitizer binary does not run under qemu-user; the release build runs this test";
#endif
  MXTEST_NEEDS(mxtest::run("command -v qemu-x86_64").code == 0, "qemu-x86_64 (Debian package qemu-user)");
  const auto stories = mxtest::stories260k();
  MXTEST_NEEDS(std::filesystem::exists(stories / "stories260K.bin"), "../shared/models/stories260K");
  constexpr int kTokens = 64;
  const mxtest::CmdResult r =
      mxtest::run("qemu-x86_64 -cpu max " + mxtest::mxserve() + " generate --model " +
                      (stories / "stories260K.bin").string() + " --prompt-ids 1 --max-tokens " +
                      std::to_string(kTokens) + " --temperature 0 --print-ids",
                  /*merge_stderr=*/true);
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<std::string> ids;
  std::istringstream lines(r.out);
  for (std::string l; std::getline(lines, l);)
    if (!l.empty() && l.find_first_not_of("0123456789 ") == std::string::npos) {
      std::istringstream w(l);
      for (std::string id; w >> id;) ids.push_back(id);
    }
  std::vector<std::string> want = mxtest::read_lines(stories / "greedy_ids_from_bos.txt");
  ASSERT_GE(want.size(), size_t(kTokens));
  want.resize(kTokens);
  EXPECT_EQ(ids, want) << r.out;
  // The emulated CPU is the one meant: AVX2 chosen, for want of AVX-512 (generate's
  // summary names the ISA).
  const mxtest::CmdResult s = mxtest::run("qemu-x86_64 -cpu max " + mxtest::mxserve() + " generate --model " +
                                              (stories / "stories260K.bin").string() + " --prompt-ids 1 --max-tokens 2",
                                          /*merge_stderr=*/true);
  EXPECT_NE(s.out.find("isa avx2,"), std::string::npos) << s.out;
}

}  // namespace
