#pragma once
#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
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

// A seed: an integer in [0, 2^64). (CLI11 turned -1, 2^64 and 1e23 into 2^64 - 1 without a word.)
inline CLI::Validator seed_validator() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        uint64_t v;
        const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
        return r.ec == std::errc() && r.ptr == s.data() + s.size() ? "" : "a seed is an integer in [0, 2^64), got " + s;
      },
      "SEED");
}

// A number >= 0 (NaN is not one: CLI11's NonNegativeNumber lets it through).
inline CLI::Validator non_negative_validator() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        double v = std::nan("");
        try {
          v = std::stod(s);
        } catch (...) {
        }
        return v >= 0 ? "" : "must be a number >= 0, got " + s;
      },
      "NUMBER >= 0");
}

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
