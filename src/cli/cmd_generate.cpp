// mxserve generate / logits: run a model on token ids from the command line.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "engine/generate.h"
#include "models/model.h"

namespace mx::cli {

namespace {
struct ModelArgs {
  std::string model;
  std::string prompt_ids;
  int threads = 0;
  void add(CLI::App* s) {
    s->add_option("--model", model, "Model directory (config.json + safetensors), .gguf file or llama2.c .bin")
        ->required();
    s->add_option("--prompt-ids", prompt_ids, "Prompt as token ids, e.g. \"1 2 3\" or 1,2,3")
        ->required();
    s->add_option("--threads", threads, "Worker threads (default: all cores)")
        ->check(CLI::Range(1, 1024));
  }
};
}  // namespace

Command add_generate(CLI::App& app) {
  auto* s = app.add_subcommand("generate", "Generate tokens from a prompt of token ids");
  auto a = std::make_shared<ModelArgs>();
  auto o = std::make_shared<GenerateOptions>();
  auto print_ids = std::make_shared<bool>(false);
  a->add(s);
  s->add_option("--max-tokens", o->max_tokens, "Tokens to generate")->check(CLI::Range(0, 1 << 24));
  s->add_option("--temperature", o->sampling.temperature, "0 = greedy")->check(CLI::Range(0.0, 100.0));
  s->add_option("--top-k", o->sampling.top_k, "Keep the k most likely tokens (0 = off)")
      ->check(CLI::Range(0, 1 << 24));
  s->add_option("--top-p", o->sampling.top_p, "Nucleus sampling mass")->check(CLI::Range(0.0, 1.0));
  s->add_option("--min-p", o->sampling.min_p, "Drop tokens below min_p * max prob")
      ->check(CLI::Range(0.0, 1.0));
  s->add_option("--seed", o->sampling.seed, "Sampling seed");
  s->add_flag("--ignore-eos", o->ignore_eos, "Do not stop at EOS");
  s->add_flag("--print-ids", *print_ids, "Print only the generated ids on stdout");
  return {s, [a, o, print_ids] {
            if (a->threads) set_global_threads(a->threads);
            auto model = load_model(a->model);
            auto prompt = parse_token_ids(a->prompt_ids);
            GenerateResult r = generate(*model, prompt, *o);
            std::string out;
            for (size_t i = 0; i < r.tokens.size(); ++i)
              out += (i ? " " : "") + std::to_string(r.tokens[i]);
            std::printf("%s\n", out.c_str());
            if (!*print_ids) {
              const int n = int(r.tokens.size());
              std::fprintf(stderr,
                           "prompt %d tokens in %.3f s (%.1f tok/s); generated %d tokens in %.3f s "
                           "(%.1f tok/s); finish: %s; isa %s, %d threads\n",
                           r.prompt_tokens, r.prefill_seconds,
                           r.prefill_seconds > 0 ? r.prompt_tokens / r.prefill_seconds : 0.0, n,
                           r.decode_seconds, r.decode_seconds > 0 ? (n - 1) / r.decode_seconds : 0.0,
                           r.finish_reason.c_str(), isa_name(best_isa()), global_pool().size());
            }
            return 0;
          }};
}

Command add_logits(CLI::App& app) {
  auto* s = app.add_subcommand("logits", "Print the last prompt position's logits, one per line");
  auto a = std::make_shared<ModelArgs>();
  a->add(s);
  return {s, [a] {
            if (a->threads) set_global_threads(a->threads);
            auto model = load_model(a->model);
            auto logits = prompt_logits(*model, parse_token_ids(a->prompt_ids));
            for (float v : logits) std::printf("%.7g\n", v);
            return 0;
          }};
}

}  // namespace mx::cli
