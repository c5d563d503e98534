// mxserve: one binary, one subcommand per job. Each subcommand lives in its own
// file under src/cli/ and registers itself here.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/auto_tune.h"
#include "cli/commands.h"
#include "core/error.h"
#include "backends/registry.h"

int main(int argc, char** argv) {
  CLI::App app{"mxserve: LLM inference engine and OpenAI-compatible server for MoE models"};
  // At most one subcommand; none is reported after parsing so that an unknown
  // word is named ("not expected: frobnicate") rather than "subcommand required".
  app.require_subcommand(0, 1);
  app.set_help_all_flag("--help-all", "Print help for every subcommand");
  // Global flags, accepted before or after the subcommand.
  app.fallthrough();
  bool strict_kernels = false;
  app.add_flag("--strict-kernels", strict_kernels,
               "A kernel call with no tuned config for its shape is an error instead of a logged fallback");
  std::vector<std::string> kernel_configs;
  app.add_option("--kernel-configs", kernel_configs,
                 "Kernel config file(s) (mxserve tune --out) read on top of the built-in table");
  bool auto_tune = false;
  app.add_flag("--auto-tune", auto_tune,
               "Use kernel configs measured on this machine for the subcommand's --model: the first run tunes them "
               "(mxserve tune in a child process, seconds) into the cache folder ($MXSERVE_CACHE_DIR, else "
               "~/.cache/mxserve), later runs read them");
  std::vector<mx::cli::Command> cmds = mx::cli::all_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (app.get_subcommands().empty()) {
    std::fprintf(stderr, "error: a subcommand is required\n%s", app.help().c_str());
    return 2;
  }
  mx::set_strict_kernels(strict_kernels);
  try {
    if (CLI::App* sub = app.get_subcommands().front(); auto_tune && sub->get_name() != "tune") {
      const CLI::Option* model = sub->get_option_no_throw("--model");
      MX_CHECK(model && model->count() > 0, "--auto-tune: {} has no --model to tune for", sub->get_name());
      if (std::string f = mx::cli::auto_tune_file(model->as<std::string>()); !f.empty()) kernel_configs.push_back(f);
    }
    mx::set_kernel_config_files(kernel_configs);
    mx::tuned_table();  // a bad config file fails here, before any work
    for (auto& c : cmds)
      if (c.sub->parsed()) return c.run();
  } catch (const mx::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 1;
}
