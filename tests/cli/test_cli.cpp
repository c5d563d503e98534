// The CLI contract: help, clear errors with non-zero exits for bad input.
#include <gtest/gtest.h>

#include <filesystem>

#include "backends/backend.h"
#include "backends/gpu_test_util.h"
#include "test_util.h"

namespace {
std::string bin() { return mxtest::mxserve(); }
std::string stories() { return (mxtest::stories260k() / "stories260K.bin").string(); }
}  // namespace

TEST(Cli, HelpForTopLevelAndEverySubcommand) {
  auto r = mxtest::run(bin() + " --help");
  EXPECT_EQ(r.code, 0);
  for (const char* sub : {"generate", "logits", "inspect", "make-test-model"}) {
    EXPECT_NE(r.out.find(sub), std::string::npos) << sub;
    EXPECT_EQ(mxtest::run(bin() + " " + sub + " --help").code, 0) << sub;
  }
}

TEST(Cli, BadInvocationsFailWithAMessage) {
  struct Bad {
    std::string args, fragment;
  };
  const std::string m = " --model " + stories();
  for (const Bad& b : std::vector<Bad>{
           {"", "subcommand"},
           {"frobnicate", "frobnicate"},
           {"generate" + m + " --prompt-ids 1 --bogus", "--bogus"},
           {"generate" + m + " --prompt-ids 1 --max-tokens -5", "--max-tokens"},
           {"generate" + m + " --prompt-ids 1 --temperature abc", "--temperature"},
           {"generate" + m + " --prompt-ids 1 --top-p 1.5", "--top-p"},
           {"generate" + m + " --prompt-ids 'one two'", "not a list of token ids"},
           {"generate" + m + " --prompt-ids 1 --max-tokens 100000", "exceeds the model's context"},
           {"generate" + m + " --prompt-ids 9999", "outside the vocabulary"},
           {"generate --model /nonexistent --prompt-ids 1", "does not exist"},
           {"generate" + m, "--prompt TEXT or --prompt-ids"},
           {"generate" + m + " --prompt-ids 9999 --backend cpu", "outside the vocabulary"},
           {"generate" + m + " --prompt-ids 1 --backend tpu", "unknown backend 'tpu'"},
           {"generate" + m + " --prompt-ids 1 --backend cuda:x", "must be a number"},
           {"generate" + m + " --prompt-ids 1 --load-format lazy", "--load-format"},
           {"generate" + m + " --prompt-ids 1 --dummy-dtype bf16", "--load-format dummy only"},
           {"generate" + m + " --prompt-ids 1 --kv-dtype int4", "--kv-dtype"},
           {"generate" + m + " --prompt-ids 1 --load-format dummy", "not valid JSON"},
           {"generate --model /nonexistent --load-format dummy --prompt-ids 1", "not a config.json"},
       }) {
    auto r = mxtest::run(bin() + " " + b.args, true);
    EXPECT_NE(r.code, 0) << b.args;
    EXPECT_NE(r.out.find(b.fragment), std::string::npos) << b.args << "\n" << r.out;
  }
}

// Found by a probe of the CLI: outputs written over their inputs or over a model without --force
// (mtp-data replaced the model it read, plan --json its config.json, make-test-model a real
// model), an empty --api-key that left the server open, a bench that waited decades for its next
// arrival, values CLI11 turned into others (--seed -1 into 2^64 - 1, --requests -1 into the default).
TEST(Cli, OutputsKeepTheirInputsAndOddValuesAreErrors) {
  mxtest::TempDir tmp;
  const std::filesystem::path d = tmp.path();
  const std::string model = (d / "stories.bin").string();
  std::filesystem::copy_file(stories(), model);
  std::filesystem::copy_file(mxtest::stories260k() / "tok512.bin", d / "tok512.bin");
  const std::string dir = (d / "m").string();
  ASSERT_EQ(mxtest::run(bin() + " make-test-model --arch qwen3 --preset tiny --out " + dir).code, 0);
  mxtest::spit(d / "m" / "stray.txt", "x");
  struct Bad {
    std::string args, fragment;
  };
  for (const Bad& b : std::vector<Bad>{
           {"mtp-data --model " + model + " --out " + model + " --sequences 1 --length 8", "is the input model"},
           {"plan --model " + dir + " --hardware h100 --scale 0.02 --json " + dir + "/config.json",
            "would overwrite a file of the input model"},
           {"make-test-model --arch llama --preset tiny --out " + dir, "exists: pass --force"},
           {"serve --model " + model + " --port 0 --api-key ''", "--api-key is empty"},
           {"bench --in-process --model " + model + " --workload custom --input-len 8 --output-len 4 "
            "--request-rate 1e-9 --requests 2 --no-progress --out " + (d / "b").string(), "below 0.001 requests/s"},
           {"bench --in-process --model " + model + " --requests -1", "--requests"},
           {"bench --in-process --model " + model + " --duration nan", "--duration"},
           {"generate --model " + model + " --prompt-ids 1 --seed -1", "a seed is an integer in [0, 2^64)"},
           {"generate --model " + model + " --prompt-ids 1 --seed 18446744073709551616", "a seed is an integer"},
       }) {
    auto r = mxtest::run("timeout 60 " + bin() + " " + b.args, true);
    EXPECT_NE(r.code, 0) << b.args;
    EXPECT_NE(r.out.find(b.fragment), std::string::npos) << b.args << "\n" << r.out;
  }
  EXPECT_EQ(mxtest::slurp(model), mxtest::slurp(stories()));  // untouched
  EXPECT_TRUE(std::filesystem::exists(d / "m" / "stray.txt"));
  // --force: the whole directory replaced once complete, nothing of the old one left beside it.
  ASSERT_EQ(mxtest::run(bin() + " make-test-model --arch llama --preset tiny --force --out " + dir).code, 0);
  EXPECT_FALSE(std::filesystem::exists(d / "m" / "stray.txt"));
  EXPECT_NE(mxtest::slurp(d / "m" / "config.json").find("LlamaForCausalLM"), std::string::npos);
  const std::string plan = (d / "plan.json").string();
  EXPECT_EQ(mxtest::run(bin() + " plan --model " + dir + " --hardware h100 --scale 0.02 --json " + plan).code, 0);
  EXPECT_EQ(mxtest::run(bin() + " plan --model " + dir + " --hardware h100 --scale 0.02 --json " + plan).code, 0);  // a report
}

// generate --backend hip (HIP-CPU in CI; each GPU backend with a device) prints
// the CPU backend's greedy ids: stories260K, and the tiny llama, qwen3_moe,
// glm4_moe with MTP drafting and deepseek_v3 (MLA) with MTP drafting.
TEST(Cli, GenerateOnEveryBackendGivesTheCpuIds) {
  std::vector<std::pair<std::string, std::string>> runs = {{stories(), ""}};
  mxtest::TempDir dir;
  for (const char* arch : {"llama", "qwen3_moe", "glm4_moe", "deepseek_v3"}) {
    const std::string d = dir / arch;
    ASSERT_EQ(mxtest::run(bin() + " make-test-model --arch " + arch + " --dtype f32 --out " + d).code, 0) << arch;
    runs.push_back({d, std::string(arch) == "glm4_moe" || std::string(arch) == "deepseek_v3"
                           ? " --speculative mtp --spec-steps 2" : ""});
  }
  const std::vector<std::string> gpus = mxtest::gpu_backends();
  for (const auto& [model, extra] : runs) {
    const std::string g = bin() + " generate --model " + model +
                          " --prompt-ids '1 5 9 2' --max-tokens 24 --temperature 0 --print-ids" + extra;
    auto cpu = mxtest::run(g + " --backend cpu");
    ASSERT_EQ(cpu.code, 0) << g;
    EXPECT_GE(cpu.out.size(), 24u * 2) << cpu.out;
    for (const std::string& k : gpus) {
      auto r = mxtest::run(g + " --backend " + k);
      ASSERT_EQ(r.code, 0) << g << " --backend " << k;
      EXPECT_EQ(r.out, cpu.out) << model << " on " << k;
    }
  }
  MXTEST_NEEDS_GPU_BACKEND(gpus);  // (the CPU runs above passed)
}

// stories260K finds its llama2.c tokenizer (tok512.bin) beside it: a text prompt
// gives llama2.c run.c's output (prompt and greedy continuation), byte for byte;
// --print-ids gives run.c's ids.
TEST(Cli, GenerateTextPromptPrintsLlama2cContinuation) {
  const std::string golden = std::string(MX_SOURCE_DIR) + "/tests/data/stories260K-goldens/";
  const std::string g = bin() + " generate --model " + stories() +
                        " --prompt 'Lily and Ben went to the park.' --max-tokens 40 --temperature 0";
  auto r = mxtest::run(g);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, mxtest::slurp(golden + "lily_and_ben_greedy40.txt"));
  auto ids = mxtest::run(g + " --print-ids");
  ASSERT_EQ(ids.code, 0);
  std::string want;
  for (const auto& l : mxtest::read_lines(golden + "lily_and_ben_greedy40_ids.txt")) want += (want.empty() ? "" : " ") + l;
  EXPECT_EQ(ids.out, want + "\n");
  // Without a tokenizer a text prompt is a clear error; --prompt and --prompt-ids exclude each other.
  mxtest::TempDir d;
  std::filesystem::copy_file(stories(), d / "m.bin");
  auto none = mxtest::run(bin() + " generate --model " + (d / "m.bin") + " --prompt hi", true);
  EXPECT_NE(none.code, 0);
  EXPECT_NE(none.out.find("--prompt needs a tokenizer"), std::string::npos) << none.out;
  auto both = mxtest::run(g + " --prompt-ids 1", true);
  EXPECT_NE(both.code, 0);
  EXPECT_NE(both.out.find("excludes"), std::string::npos) << both.out;
}

TEST(Cli, MalformedSafetensorsNamesTheProblem) {
  mxtest::TempDir d;
  mxtest::run(bin() + " make-test-model --arch llama --preset tiny --out " + d.path().string());
  // Truncate the weights file: the loader must say which tensor runs past the end.
  auto bytes = mxtest::slurp(d / "model.safetensors");
  mxtest::spit(d / "model.safetensors", bytes.substr(0, bytes.size() - 1000));
  auto r = mxtest::run(bin() + " inspect --model " + d.path().string(), true);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("past the data section"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("truncated"), std::string::npos) << r.out;
}

TEST(Cli, InspectShowsArchitectureAndMapping) {
  auto r = mxtest::run(bin() + " inspect --model " + stories());
  ASSERT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("architecture: LlamaForCausalLM"), std::string::npos);
  EXPECT_NE(r.out.find("parameters: "), std::string::npos);
  EXPECT_NE(r.out.find("model.layers.4.self_attn.q_proj.weight -> model.layers.4.self_attn.wq  F32 [64, 64]"),
            std::string::npos)
      << r.out;
}

TEST(Cli, TuneWritesEntriesThatMakeAModelStrictClean) {
  mxtest::TempDir d;
  const std::string model = d / "m";
  ASSERT_EQ(mxtest::run(bin() + " make-test-model --arch llama --preset tiny --out " + model).code, 0);
  const std::string cfg = d / "kc.json";
  const std::string gen = " generate --model " + model + " --prompt-ids 1,2,3 --max-tokens 3 --print-ids";
  auto r = mxtest::run("MXSERVE_THREADS=1 " + bin() + " tune --model " + model + " --out " + cfg +
                           " --min-ms 0.5 --calls 2",
                       true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("wrote"), std::string::npos) << r.out;
  auto text = mxtest::slurp(cfg);
  EXPECT_NE(text.find("\"format\": \"mxserve-kernel-configs\""), std::string::npos);
  EXPECT_NE(text.find("\"out\": 160, \"in\": 64"), std::string::npos) << text;  // the tiny MLP's gate/up
  // With the file, strict mode runs the model; a second tune merges into it.
  auto g = mxtest::run(bin() + " --strict-kernels --kernel-configs " + cfg + gen, true);
  EXPECT_EQ(g.code, 0) << g.out;
  const size_t n_before = std::count(text.begin(), text.end(), '\n');
  ASSERT_EQ(mxtest::run(bin() + " tune --synthetic --shapes 48x80 --dtypes BF16 --isas scalar --out " + cfg, true).code, 0);
  auto text2 = mxtest::slurp(cfg);
  EXPECT_EQ(size_t(std::count(text2.begin(), text2.end(), '\n')), n_before + 1);
  // Bad files and bad arguments are clear errors.
  mxtest::spit(d / "bad.json", "{\"format\": 1");
  auto b = mxtest::run(bin() + " --kernel-configs " + d / "bad.json" + gen, true);
  EXPECT_NE(b.code, 0);
  EXPECT_NE(b.out.find("not valid JSON"), std::string::npos) << b.out;
  auto s = mxtest::run(bin() + " tune --synthetic --shapes 4x --out " + cfg, true);
  EXPECT_NE(s.code, 0);
  EXPECT_NE(s.out.find("bad shape"), std::string::npos) << s.out;
}

// --auto-tune: the first run with a model tunes its shapes into the cache folder,
// the next reads that file, the output ids are the same; without a --model it is
// an error.
TEST(Cli, AutoTuneTunesOnFirstUseThenReadsTheCache) {
  mxtest::TempDir cache;
  const std::string env = "MXSERVE_CACHE_DIR=" + cache.path().string() + " ";
  const std::string gen = " --auto-tune generate --model " + stories() + " --prompt-ids 1,2,3 --max-tokens 6";
  auto first = mxtest::run(env + bin() + gen, true);
  ASSERT_EQ(first.code, 0) << first.out;
  EXPECT_NE(first.out.find("auto-tune: first run"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("tune: wrote"), std::string::npos) << first.out;
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(cache.path())) {
    EXPECT_EQ(e.path().extension(), ".json") << e.path();  // no temporary left behind
    ++files;
  }
  EXPECT_EQ(files, 1);
  auto second = mxtest::run(env + bin() + gen, true);
  ASSERT_EQ(second.code, 0) << second.out;
  EXPECT_NE(second.out.find("auto-tune: kernel configs for this machine and model from"), std::string::npos)
      << second.out;
  EXPECT_EQ(second.out.find("tune: wrote"), std::string::npos) << second.out;
  auto plain = mxtest::run(bin() + " generate --model " + stories() + " --prompt-ids 1,2,3 --max-tokens 6", true);
  auto ids = [](const std::string& out) { return out.substr(out.rfind('\n', out.size() - 2) + 1); };
  EXPECT_EQ(ids(second.out), ids(plain.out));
  auto r = mxtest::run(env + bin() + " --auto-tune make-test-model --arch llama --preset tiny --out " +
                           (cache.path() / "m").string(),
                       true);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("has no --model to tune for"), std::string::npos) << r.out;
}
