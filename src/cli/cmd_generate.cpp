// mxserve generate / logits: run a model on token ids from the command line.
#include <cstdio>
#include <memory>

#include <chrono>

#include "cli/commands.h"
#include "cli/load_args.h"
#include "cli/parallel_args.h"
#include "cli/spec_args.h"
#include "engine/engine.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "engine/generate.h"
#include "backends/backend.h"
#include "backends/cpu/matmul.h"
#include "tokenizer/model_tokenizer.h"
#include "models/model.h"

namespace mx::cli {

namespace {
struct ModelArgs {
  std::string model;
  std::string prompt_ids;
  std::string tokenizer;
  int threads = 0;
  ParallelOptions par;
  LoadOptions lo;
  void add(CLI::App* s) {
    add_parallel_options(s, par);
    s->add_option("--model", model, "Model directory (config.json + safetensors), .gguf file or llama2.c .bin")
        ->required();
    s->add_option("--prompt-ids", prompt_ids, "Prompt as token ids, e.g. \"1 2 3\" or 1,2,3");
    s->add_option("--threads", threads, "Worker threads (default: all cores)")
        ->check(CLI::Range(1, 1024));
    s->add_option("--tokenizer", tokenizer, kTokenizerOptionHelp);
    add_load_options(s, lo);
  }
  // The prompt's ids: --prompt-ids as given, or --prompt TEXT encoded (with BOS
  // where the vocabulary adds it) by the model's tokenizer.
  std::vector<int32_t> prompt(const std::string& text, const Tokenizer* tok) const {
    if (text.empty()) return parse_token_ids(prompt_ids);
    MX_CHECK(tok, "--prompt needs a tokenizer and none was found for {} (pass --tokenizer FILE, or --prompt-ids)",
             model);
    return tok->encode(text, /*add_special=*/true);
  }
  // Null on an MPI follower rank (it followed the leader's forwards until the end).
  std::unique_ptr<Model> load() const {
    return load_parallel_model(model, par, lo);
  }
};
// With speculative decoding the one request runs through the serving engine,
// which owns the drafters and verification.
GenerateResult generate_speculative(std::unique_ptr<Model> model, const std::vector<int32_t>& prompt,
                                    const GenerateOptions& o, const SpecOptions& spec, EngineMetrics* stats) {
  EngineOptions eo;
  eo.max_running = 1;
  eo.step_tokens = std::max(o.prefill_chunk, spec.steps + 1);
  eo.spec = spec;
  eo.kv_dtype = o.kv_dtype;
  Engine engine(std::move(model), eo);
  GenerationRequest req;
  req.prompt = prompt;
  req.sampling = o.sampling;
  req.max_tokens = o.max_tokens;
  req.ignore_eos = o.ignore_eos;
  GenerateResult r;
  r.prompt_tokens = int(prompt.size());
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto t_first = t0;
  engine.submit(std::move(req), [&](const TokenEvent& ev) {
    if (ev.token >= 0) {
      if (r.tokens.empty()) t_first = clock::now();
      r.tokens.push_back(ev.token);
    }
    if (ev.finished) {
      r.finish_reason = ev.finish_reason;
      r.error = ev.error;
    }
  });
  engine.run_until_idle();
  const auto t1 = clock::now();
  r.prefill_seconds = std::chrono::duration<double>(t_first - t0).count();
  r.decode_seconds = std::chrono::duration<double>(t1 - t_first).count();
  *stats = engine.metrics();
  return r;
}

}  // namespace

Command add_generate(CLI::App& app) {
  auto* s = app.add_subcommand("generate", "Generate tokens from a text prompt or a prompt of token ids");
  auto a = std::make_shared<ModelArgs>();
  auto text = std::make_shared<std::string>();
  auto o = std::make_shared<GenerateOptions>();
  auto print_ids = std::make_shared<bool>(false);
  auto spec = std::make_shared<SpecArgs>();
  auto comm_stats = std::make_shared<bool>(false);
  a->add(s);
  auto* text_opt = s->add_option("--prompt", *text, "Prompt text, encoded by the model's tokenizer; the prompt and "
                                                   "its continuation are printed as text");
  text_opt->excludes(s->get_option("--prompt-ids"));
  spec->add(s);
  s->add_flag("--comm-stats", *comm_stats, "Print the bytes every rank sent per token, by collective (stderr)");
  s->add_option("--max-tokens", o->max_tokens, "Tokens to generate")->check(CLI::Range(0, 1 << 24));
  s->add_option("--temperature", o->sampling.temperature, "0 = greedy")->check(CLI::Range(0.0, 100.0));
  s->add_option("--top-k", o->sampling.top_k, "Keep the k most likely tokens (0 = off)")
      ->check(CLI::Range(0, 1 << 24));
  s->add_option("--top-p", o->sampling.top_p, "Nucleus sampling mass")->check(CLI::Range(0.0, 1.0));
  s->add_option("--min-p", o->sampling.min_p, "Drop tokens below min_p * max prob")
      ->check(CLI::Range(0.0, 1.0));
  s->add_option("--seed", o->sampling.seed, "Sampling seed")->check(seed_validator());
  s->add_flag("--ignore-eos", o->ignore_eos, "Do not stop at EOS");
  add_kv_dtype_option(s, o->kv_dtype);
  s->add_flag("--print-ids", *print_ids, "Print only the generated ids on stdout (also with --prompt)");
  return {s, [a, o, text, print_ids, spec, comm_stats] {
            MX_CHECK(!text->empty() || !a->prompt_ids.empty(), "generate: give --prompt TEXT or --prompt-ids IDS");
            if (a->threads) set_global_threads(a->threads);
            const SpecOptions so = spec->get();
            auto model = a->load();
            if (!model) return 0;  // an MPI follower rank: the leader printed the result
            // Only a text prompt needs the tokenizer: token-id runs never depend on one.
            const ModelTokenizer tok = text->empty() && a->tokenizer.empty()
                                           ? ModelTokenizer{}
                                           : load_model_tokenizer(a->model, a->tokenizer);
            tok.check_fits(model->config().vocab_size);
            auto prompt = a->prompt(*text, tok.tokenizer.get());
            EngineMetrics stats;
            const size_t bytes_per_token = model->bytes_per_token();  // the engine may take the model
            // The parallel model stays reachable for --comm-stats after the engine took it.
            auto* pm = dynamic_cast<ParallelModel*>(model.get());
            GenerateResult r = so.mode == SpecMode::off
                                   ? generate(*model, prompt, *o)
                                   : generate_speculative(std::move(model), prompt, *o, so, &stats);
            if (*comm_stats) {
              const uint64_t toks = r.prompt_tokens + r.tokens.size();
              std::fprintf(stderr, "comm (tp %d, ep %d, %llu tokens): %s; rank 0 resident %.0f MiB\n", a->par.tp,
                           a->par.ep, (unsigned long long)toks,
                           pm && so.mode == SpecMode::off ? describe_comm(pm->group_stats(), toks).c_str()
                              : pm ? "not reported with --speculative" : "one rank, no communication",
                           resident_bytes() / 1048576.0);
            }
            std::string out;
            if (!text->empty() && !*print_ids) {
              // As llama2.c's run.c and llama.cpp print it: the prompt, then its continuation.
              // Ids past a tokenizer smaller than the model's vocabulary (padding) have no text.
              std::vector<int32_t> all = prompt;
              for (int32_t t : r.tokens)
                if (size_t(t) < tok.tokenizer->vocab_size) all.push_back(t);
              out = tok.tokenizer->decode(all);
            } else {
              for (size_t i = 0; i < r.tokens.size(); ++i) out += (i ? " " : "") + std::to_string(r.tokens[i]);
            }
            std::printf("%s\n", out.c_str());
            if (!*print_ids) {
              const int n = int(r.tokens.size());
              std::fprintf(stderr,
                           "prompt %d tokens in %.3f s (%.1f tok/s); generated %d tokens in %.3f s "
                           "(%.1f tok/s); finish: %s; isa %s, %d threads\n",
                           r.prompt_tokens, r.prefill_seconds,
                           r.prefill_seconds > 0 ? r.prompt_tokens / r.prefill_seconds : 0.0, n,
                           r.decode_seconds, r.decode_seconds > 0 ? (n - 1) / r.decode_seconds : 0.0,
                           describe(r.finish_reason, r.error).c_str(), matmul_isa_label(best_isa()).c_str(),
                           global_pool().size());
              if (r.decode_seconds > 0 && n > 1)
                std::fprintf(stderr, "backend %s: %.1f GB/s of weights per decoded token (%.1f MiB a token)\n",
                             a->par.device.c_str(), bytes_per_token * ((n - 1) / r.decode_seconds) / 1e9,
                             bytes_per_token / 1048576.0);
              if (so.mode != SpecMode::off)
                std::fprintf(stderr,
                             "speculative %s k=%d: %llu rounds, %llu drafted, %llu accepted (%.1f%%), "
                             "%.2f tokens per round\n",
                             spec_mode_name(so.mode), so.steps, (unsigned long long)stats.spec_rounds,
                             (unsigned long long)stats.spec_draft_tokens,
                             (unsigned long long)stats.spec_accepted_tokens,
                             stats.spec_draft_tokens ? 100.0 * stats.spec_accepted_tokens / stats.spec_draft_tokens : 0.0,
                             stats.spec_rounds ? double(stats.spec_accepted_tokens + stats.spec_rounds) / stats.spec_rounds
                                               : 0.0);
            }
            return 0;
          }};
}

Command add_logits(CLI::App& app) {
  auto* s = app.add_subcommand("logits", "Print the last prompt position's logits, one per line");
  auto a = std::make_shared<ModelArgs>();
  auto kv_dtype = std::make_shared<std::string>("auto");
  a->add(s);
  add_kv_dtype_option(s, *kv_dtype);
  s->get_option("--prompt-ids")->required();
  return {s, [a, kv_dtype] {
            if (a->threads) set_global_threads(a->threads);
            auto model = a->load();
            if (!model) return 0;
            auto logits = prompt_logits(*model, parse_token_ids(a->prompt_ids), false, 512, *kv_dtype);
            for (float v : logits) std::printf("%.7g\n", v);
            return 0;
          }};
}

}  // namespace mx::cli
