// mxserve mtp-data: self-distillation data for training an MTP head (devtools/mtp_data.h).
#include <cstdio>

#include "core/atomic_output.h"
#include "cli/commands.h"
#include "cli/load_args.h"
#include "cli/parallel_args.h"
#include "core/thread_pool.h"
#include "models/model.h"
#include "devtools/mtp_data.h"

namespace mx::cli {

Command add_mtp_data(CLI::App& app) {
  auto* s = app.add_subcommand("mtp-data",
                               "Generate sequences with a model and record its hidden states and top-k logits "
                               "at every position: the training data of tools/train_mtp_head.py");
  auto model = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto o = std::make_shared<MtpDataOptions>();
  auto threads = std::make_shared<int>(0);
  auto lo = std::make_shared<LoadOptions>();
  auto backend = std::make_shared<std::string>("cpu");
  s->add_option("--backend", *backend, kBackendOptionHelp)->capture_default_str();
  s->add_option("--model", *model, "Model directory, .gguf or llama2.c .bin")->required();
  s->add_option("--out", *out, "Output safetensors file")->required();
  s->add_option("--sequences", o->sequences, "Sequences to generate")->capture_default_str();
  s->add_option("--length", o->length, "Tokens per sequence (prompt included)")->capture_default_str();
  s->add_option("--top-k", o->top_k, "Logits kept per position")->capture_default_str();
  s->add_option("--seed", o->seed, "Seed of the prompts and the sampling")->capture_default_str()->check(seed_validator());
  s->add_option("--max-running", o->max_running, "Sequences generated at once")->capture_default_str();
  add_load_options(s, *lo);  // a --mtp-head's picks go in mtp_top1
  s->add_option("--threads", *threads, "Worker threads (default: all cores)")->check(CLI::Range(1, 1024));
  auto force = std::make_shared<bool>(false);
  s->add_flag("--force", *force, "Replace an existing --out file (never the input)");
  return {s, [model, out, o, threads, lo, backend, force] {
            check_output_target(*out, *force, *model);
            if (!lo->mtp_head.empty()) check_not_input(*out, lo->mtp_head);  // the head it reads too
            if (*threads) set_global_threads(*threads);
            lo->backend = *backend;
            const MtpDataStats st = write_mtp_data(load_model(*model, *lo), *o, *out);
            std::fprintf(stderr,
                         "wrote %s: %d sequences x %d tokens (generated in %.1f s, hidden states and top-%d "
                         "logits in %.1f s)\n",
                         out->c_str(), o->sequences, o->length, st.generate_seconds, o->top_k, st.forward_seconds);
            return 0;
          }};
}

}  // namespace mx::cli
