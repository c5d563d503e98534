// mxserve make-test-model: synthetic HF-layout checkpoints (devtools/synthetic.h).
#include <cstdio>

#include "core/atomic_output.h"
#include "cli/commands.h"
#include "devtools/synthetic.h"

namespace mx::cli {

Command add_make_test_model(CLI::App& app) {
  auto* s = app.add_subcommand("make-test-model",
                               "Write a random-weight checkpoint with a real family's tensor names, plus a "
                               "trained byte-level BPE tokenizer and the family's chat template");
  auto spec = std::make_shared<SyntheticSpec>();
  auto out = std::make_shared<std::string>();
  auto dtype = std::make_shared<std::string>("bf16");
  auto shard_mb = std::make_shared<size_t>(2048);
  s->add_option("--arch", spec->arch, "llama | qwen2 | qwen3 | glm4_moe | deepseek_v3 | qwen3_moe")
      ->check(CLI::IsMember({"llama", "qwen2", "qwen3", "glm4_moe", "deepseek_v3", "qwen3_moe"}));
  s->add_option("--preset", spec->preset, "tiny | small | medium")
      ->check(CLI::IsMember({"tiny", "small", "medium"}));
  s->add_option("--out", *out, "Output directory")->required();
  s->add_option("--seed", spec->seed, "Random seed")->check(seed_validator());
  s->add_option("--dtype", *dtype, "bf16 | f32")->check(CLI::IsMember({"bf16", "f32"}));
  s->add_option("--shard-mb", *shard_mb, "Maximum shard size in MiB")->check(CLI::Range(1, 1 << 20));
  auto force = std::make_shared<bool>(false);
  s->add_flag("--force", *force, "Replace an existing --out directory (swapped in only once the new one is complete)");
  return {s, [spec, out, dtype, shard_mb, force] {
            spec->dtype = *dtype == "f32" ? DType::F32 : DType::BF16;
            spec->max_shard_bytes = *shard_mb << 20;
            check_output_target(*out, *force, "");
            AtomicDir dir(*out);  // a whole new directory: no file of the one it replaces stays beside
            int64_t n = write_synthetic_model(dir.path(), *spec);
            dir.commit();
            std::fprintf(stderr, "wrote %s %s (%lld parameters, tokenizer.json + tokenizer_config.json) to %s\n",
                         spec->arch.c_str(), spec->preset.c_str(), (long long)n, out->c_str());
            return 0;
          }};
}

}  // namespace mx::cli
