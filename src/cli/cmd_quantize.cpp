// mxserve quantize / quality: write an MXFP4 or FP8 checkpoint and measure
// what it costs.
#include <cstdio>
#include <fstream>
#include <utility>

#include "cli/commands.h"
#include "models/model.h"
#include "convert/quality.h"
#include "convert/quantizer.h"

namespace mx::cli {

namespace {
struct QualityArgs {
  std::string calib;
  int sequences = 8, length = 128;
  uint64_t seed = 0;
  bool exact_reference = false;
  static constexpr const char* kExactHelp =
      "Run the reference with exact f32 products and an f32 KV cache (as MXSERVE_BF16_ACTIVATIONS=0), so the KL "
      "also counts what the CPU's bf16 matmul and attention products and its bf16 KV cache cost";
  void add(CLI::App* s) {
    s->add_flag("--exact-reference", exact_reference, kExactHelp);
    s->add_option("--calib", calib, "Token-id sequences to measure on, one per line (default: the "
                                    "reference model's own samples)");
    s->add_option("--sequences", sequences, "Self-generated sequences when no --calib")->check(CLI::Range(1, 10000));
    s->add_option("--length", length, "Tokens per self-generated sequence")->check(CLI::Range(2, 1 << 20));
    s->add_option("--seed", seed, "Seed of the self-generated sequences")->check(seed_validator());
  }
  QualityReport run(Model& ref, Model& q) const {
    auto seqs = calib.empty() ? self_generated_sequences(ref, sequences, length, seed) : read_token_file(calib);
    return measure_quality(ref, q, seqs, exact_reference);
  }
};
}  // namespace

Command add_quantize(CLI::App& app) {
  auto* s = app.add_subcommand("quantize", "Quantize a checkpoint's Linear weights to MXFP4 (Quark layout) or FP8");
  auto in = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  auto format = std::make_shared<std::string>();
  auto o = std::make_shared<QuantizeOptions>();
  auto search = std::make_shared<bool>(false), no_defaults = std::make_shared<bool>(false);
  auto measure = std::make_shared<bool>(false);
  auto qa = std::make_shared<QualityArgs>();
  s->add_option("--model", *in, "Input model (HF directory or llama2.c .bin)")->required();
  s->add_option("--out", *out, "Output directory (written beside it as OUT.tmp-XXXXXX, then renamed into place)")
      ->required();
  s->add_option("--format", *format, "mxfp4 | fp8")->required()->check(CLI::IsMember({"mxfp4", "fp8"}));
  s->add_option("--exclude", o->exclude,
                "Keep matching Linear layers unquantized: exact name, glob, or re:REGEX (repeatable)");
  s->add_flag("--no-default-excludes", *no_defaults, "Also quantize router gates, lm_head and MTP layers");
  s->add_flag("--strict", o->strict, "An exclude pattern that matches nothing is an error");
  s->add_flag("--force", o->force,
              "Replace an existing --out directory (swapped in only once the new output is complete; never the input)");
  s->add_flag("--scale-search", *search, "MXFP4: pick each block's scale minimising its error");
  s->add_flag("--measure", *measure, "Measure quality against the input (as mxserve eval) and write OUT/quality.json");
  qa->add(s);
  return {s, [=] {
            o->method = *format == "fp8" ? QuantMethod::Fp8Block : QuantMethod::Mxfp4;
            o->default_excludes = !*no_defaults;
            if (*search) o->scale_rule = mxfp4::ScaleRule::Search;
            QuantizeReport r = quantize_checkpoint(*in, *out, *o);
            for (const auto& w : r.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
            std::fprintf(stderr, "quantized %d Linear layers to %s, kept %d unquantized; %.1f MiB -> %.1f MiB\n",
                         r.quantized, format->c_str(), r.kept, r.bytes_in / 1048576.0, r.bytes_out / 1048576.0);
            if (*measure || !qa->calib.empty()) {
              auto ref = load_model(*in), q = load_model(*out);
              auto layers = weight_errors(*ref, *q);  // first: it fails at once on models that differ
              QualityReport rep = qa->run(*ref, *q);
              rep.layers = std::move(layers);
              std::fprintf(stderr, "%s", rep.to_text().c_str());
              std::ofstream(*out + "/quality.json") << rep.to_json() << "\n";
            }
            return 0;
          }};
}

Command add_eval(CLI::App& app) {
  auto* s = app.add_subcommand("eval", "Measure a (quantized) model against a reference: KL, top-1, perplexity, weight error");
  auto ref = std::make_shared<std::string>(), model = std::make_shared<std::string>();
  auto json_out = std::make_shared<bool>(false);
  auto qa = std::make_shared<QualityArgs>();
  s->add_option("--model", *model, "Model to evaluate (e.g. the quantized checkpoint)")->required();
  s->add_option("--reference", *ref, "Reference model (e.g. the original checkpoint)")->required();
  s->add_option("--tokens", qa->calib, "Token-id sequences, one per line (default: the reference's own samples)");
  s->add_option("--sequences", qa->sequences, "Self-generated sequences when no --tokens")->check(CLI::Range(1, 10000));
  s->add_option("--length", qa->length, "Tokens per self-generated sequence")->check(CLI::Range(2, 1 << 20));
  s->add_option("--seed", qa->seed, "Seed of the self-generated sequences")->check(seed_validator());
  s->add_flag("--exact-reference", qa->exact_reference, QualityArgs::kExactHelp);
  s->add_flag("--json", *json_out, "Print JSON");
  return {s, [=] {
            auto r = load_model(*ref), m = load_model(*model);
            auto layers = weight_errors(*r, *m);  // first: it fails at once on models that differ
            QualityReport rep = qa->run(*r, *m);
            rep.layers = std::move(layers);
            std::printf("%s\n", *json_out ? rep.to_json().c_str() : rep.to_text().c_str());
            return 0;
          }};
}

}  // namespace mx::cli
