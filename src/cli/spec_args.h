#pragma once
// --speculative / --spec-steps / ... shared by serve and generate.
#include <CLI/CLI.hpp>
#include <string>

#include "spec/drafter.h"

namespace mx::cli {

struct SpecArgs {
  std::string mode = "off";
  SpecOptions opts;

  void add(CLI::App* s) {
    s->add_option("--speculative", mode, "Speculative decoding: off, ngram (prompt lookup) or mtp (the model's nextn layer)")
        ->check(CLI::IsMember({"off", "ngram", "mtp"}))
        ->capture_default_str();
    s->add_option("--spec-steps", opts.steps, "Draft tokens per verification (k)")
        ->check(CLI::Range(1, 16))
        ->capture_default_str();
    s->add_flag("--spec-adaptive", opts.adaptive, "Per-request draft length following its acceptance");
    s->add_option("--ngram-max", opts.ngram_max, "n-gram lookup: longest suffix matched")
        ->check(CLI::Range(1, 64))
        ->capture_default_str();
    s->add_option("--ngram-min", opts.ngram_min, "n-gram lookup: shortest suffix matched")
        ->check(CLI::Range(1, 64))
        ->capture_default_str();
  }
  SpecOptions get() const {
    SpecOptions o = opts;
    o.mode = parse_spec_mode(mode);
    o.validate();
    return o;
  }
};

}  // namespace mx::cli
