// quantize and convert write their output completely or not at all (issue 21,
// findings 5 and 6): a unique temporary beside the target, renamed into place;
// an existing output is replaced only with --force, the input never; a kill -9
// mid-write leaves the previous output intact; a process that has the old
// output mmapped keeps reading it.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "core/atomic_output.h"
#include "engine/generate.h"
#include "models/model.h"
#include "devtools/synthetic.h"
#include "convert/quantizer.h"
#include "test_util.h"

extern char** environ;

using namespace mx;
namespace fs = std::filesystem;

namespace {

std::string make_model(const mxtest::TempDir& d, const std::string& preset = "tiny") {
  const std::string m = d / "model";
  SyntheticSpec s;
  s.arch = "glm4_moe";
  s.preset = preset;
  write_synthetic_model(m, s);
  return m;
}

QuantizeOptions fmt_opts(QuantMethod m, bool force = false) {
  QuantizeOptions o;
  o.method = m;
  o.force = force;
  return o;
}

TEST(AtomicWriters, QuantizeRefusesToOverwriteUnlessForcedAndNeverTheInput) {
  mxtest::TempDir d;
  const std::string m = make_model(d), out = d / "q";
  quantize_checkpoint(m, out, fmt_opts(QuantMethod::Fp8Block));
  EXPECT_EQ(load_checkpoint(out).config.quant.method, QuantMethod::Fp8Block);
  try {
    quantize_checkpoint(m, out, fmt_opts(QuantMethod::Mxfp4));
    ADD_FAILURE() << "overwrote without --force";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--force"), std::string::npos) << e.what();
  }
  EXPECT_EQ(load_checkpoint(out).config.quant.method, QuantMethod::Fp8Block);
  quantize_checkpoint(m, out, fmt_opts(QuantMethod::Mxfp4, true));
  EXPECT_EQ(load_checkpoint(out).config.quant.method, QuantMethod::Mxfp4);
  for (const std::string& bad : {m, m + "/", d / "model/../model"})
    EXPECT_THROW(quantize_checkpoint(m, bad, fmt_opts(QuantMethod::Mxfp4, true)), Error) << bad;
  // No temporaries left behind by the runs that completed or were refused.
  for (const auto& e : fs::directory_iterator(d.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST(AtomicWriters, AServerWithTheOldOutputMappedKeepsItsModel) {
  mxtest::TempDir d;
  const std::string m = make_model(d), out = d / "q";
  quantize_checkpoint(m, out, fmt_opts(QuantMethod::Mxfp4));
  auto served = load_model(out);  // mmaps the files
  const std::vector<float> before = prompt_logits(*served, {1, 2, 3, 4});
  quantize_checkpoint(m, out, fmt_opts(QuantMethod::Fp8Block, true));
  EXPECT_EQ(prompt_logits(*served, {1, 2, 3, 4}), before);
  EXPECT_EQ(load_checkpoint(out).config.quant.method, QuantMethod::Fp8Block);
}

TEST(AtomicWriters, KillMinus9MidWriteLeavesThePreviousOutput) {
  mxtest::TempDir d;
  const std::string m = make_model(d, "small"), out = d / "q";
  quantize_checkpoint(m, out, fmt_opts(QuantMethod::Fp8Block));
  int killed_mid_write = 0;
  for (int attempt = 0; attempt < 5; ++attempt) {
    const std::string bin = mxtest::mxserve();
    std::vector<std::string> args = {bin, "quantize", "--model", m, "--out", out, "--format", "mxfp4", "--force"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, bin.c_str(), &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    // Kill it as soon as its temporary output directory has a file in it.
    bool seen = false;
    for (int i = 0; i < 20000 && !seen; ++i) {
      for (const auto& e : fs::directory_iterator(d.path()))
        if (e.path().filename().string().rfind("q.tmp-", 0) == 0 && !fs::is_empty(e.path())) seen = true;
      if (!seen) std::this_thread::sleep_for(std::chrono::microseconds(200));
      int st = 0;
      if (!seen && waitpid(pid, &st, WNOHANG) == pid) break;  // finished first
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    // Complete either way: the previous FP8 output, or (killed after the rename) the whole new one.
    const Checkpoint ck = load_checkpoint(out);
    EXPECT_NO_THROW(build_model(ck));
    if (ck.config.quant.method == QuantMethod::Fp8Block && seen) ++killed_mid_write;
    if (ck.config.quant.method != QuantMethod::Fp8Block) quantize_checkpoint(m, out, fmt_opts(QuantMethod::Fp8Block, true));
    if (killed_mid_write) break;
  }
  EXPECT_GT(killed_mid_write, 0) << "no run was killed mid-write in 5 tries";
}

TEST(AtomicWriters, ConvertRefusesToOverwriteUnlessForcedAndNeverTheInput) {
  mxtest::TempDir d;
  const std::string m = make_model(d), g = d / "m.gguf";
  const std::string conv = mxtest::mxserve() + " convert --model " + m + " --type f32 --out ";
  ASSERT_EQ(mxtest::run(conv + g).code, 0);
  auto again = mxtest::run(conv + g, true);
  EXPECT_NE(again.code, 0);
  EXPECT_NE(again.out.find("--force"), std::string::npos) << again.out;
  EXPECT_EQ(mxtest::run(conv + g + " --force").code, 0);
  // The input checkpoint's own file, and the input GGUF itself, are refused even with --force.
  auto in_dir = mxtest::run(conv + m + "/model.safetensors --force", true);
  EXPECT_NE(in_dir.code, 0);
  EXPECT_NE(in_dir.out.find("input"), std::string::npos) << in_dir.out;
  auto self = mxtest::run(mxtest::mxserve() + " convert --model " + g + " --type f32 --force --out " + g, true);
  EXPECT_NE(self.code, 0);
  EXPECT_NE(self.out.find("input"), std::string::npos) << self.out;
  EXPECT_NO_THROW(load_model(g));
  EXPECT_NO_THROW(load_model(m));
  // Two converts to one path at once: each writes its own temporary; the file is one of them, whole.
  std::thread a([&] { mxtest::run(conv + g + " --force"); });
  std::thread b([&] { mxtest::run(mxtest::mxserve() + " convert --model " + m + " --type bf16 --force --out " + g); });
  a.join();
  b.join();
  EXPECT_NO_THROW(load_model(g));
  for (const auto& e : fs::directory_iterator(d.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

}  // namespace
