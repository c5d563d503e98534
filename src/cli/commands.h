#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

namespace mx::cli {

struct Command {
  CLI::App* sub;
  std::function<int()> run;  // exit code
};

// The --tokenizer option of the subcommands that take text (tokenizer/model_tokenizer.h).
inline constexpr const char* kTokenizerOptionHelp =
    "Tokenizer file (tokenizer.json, .gguf or llama2.c tokenizer.bin); default: the model's own (tokenizer.json in "
    "its directory, the GGUF's, or tok{vocab}.bin / tokenizer.bin of its vocabulary size beside a llama2.c "
    "checkpoint)";

// Each adds its subcommand to app and returns how to run it.
Command add_generate(CLI::App& app);
Command add_logits(CLI::App& app);
Command add_inspect(CLI::App& app);
Command add_make_test_model(CLI::App& app);
Command add_quantize(CLI::App& app);
Command add_eval(CLI::App& app);
Command add_serve(CLI::App& app);
Command add_tune(CLI::App& app);
Command add_route(CLI::App& app);  // cmd_route.cpp: data-parallel HTTP router
Command add_convert(CLI::App& app);
Command add_bench(CLI::App& app);
Command add_plan(CLI::App& app);
Command add_mtp_data(CLI::App& app);  // cmd_mtp_data.cpp: MTP head training data

inline std::vector<Command> all_commands(CLI::App& app) {
  return {add_generate(app), add_logits(app), add_inspect(app), add_make_test_model(app),
          add_quantize(app),  add_eval(app),   add_serve(app),    add_route(app),
          add_tune(app),      add_convert(app), add_bench(app),    add_plan(app),
          add_mtp_data(app)};
}

}  // namespace mx::cli
