// mxserve convert: write a checkpoint as GGUF so llama.cpp can run the same model.
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "core/atomic_output.h"
#include "convert/gguf_export.h"
#include "formats/gguf_model.h"
#include "tokenizer/model_tokenizer.h"
#include "models/model.h"

namespace mx::cli {

Command add_convert(CLI::App& app) {
  auto* s = app.add_subcommand("convert", "Convert a checkpoint (HF directory) to a GGUF file for llama.cpp");
  auto in = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  auto type = std::make_shared<std::string>("bf16");
  auto tokenizer = std::make_shared<std::string>();
  s->add_option("--model", *in, "Input model (HF directory, possibly MXFP4-quantized by mxserve quantize)")->required();
  s->add_option("--out", *out, "Output .gguf file")->required();
  s->add_option("--type", *type,
                "f32 | f16 | bf16: weights of rank >= 2 in that type (1-D in f32); mxfp4: the Linear layers "
                "mxserve quantize would quantize in MXFP4 (llama.cpp block_mxfp4), the rest as stored")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "mxfp4"}));
  s->add_option("--tokenizer", *tokenizer,
                "A SentencePiece-style tokenizer to write into the GGUF (e.g. llama2.c's tok512.bin) for a model "
                "without tokenizer.json; default: a llama2.c checkpoint's own tokenizer file beside it");
  auto force = std::make_shared<bool>(false);
  s->add_flag("--force", *force, "Replace an existing --out file (never the input)");
  return {s, [=] {
            check_output_target(*out, *force, *in);
            const Checkpoint ck = load_checkpoint(*in);
            // A tokenizer.json (byte-level BPE) in the model directory is written as it is; otherwise
            // a SentencePiece-style tokenizer file, given or found beside a llama2.c checkpoint.
            ModelTokenizer mt;
            const bool has_json = !ck.hf_dir.empty() && std::filesystem::exists(std::filesystem::path(ck.hf_dir) / "tokenizer.json");
            if (!tokenizer->empty() || !has_json) mt = load_model_tokenizer(*in, *tokenizer);
            if (mt.tokenizer && mt.tokenizer->model != "llama" && tokenizer->empty()) mt = {};  // a GGUF's own BPE
            if (mt.tokenizer && mt.tokenizer->model != "llama")
              fail("--tokenizer {}: a '{}' tokenizer; convert writes SentencePiece-style ones from a file "
                   "(byte-level BPE comes from the model's tokenizer.json)", mt.path, mt.tokenizer->model);
            const ConvertReport r = write_gguf_checkpoint(ck, *out, gguf_out_type(*type), mt.tokenizer.get());
            std::fprintf(stderr, "wrote %s: %d tensors (%d MXFP4), %.1f MiB%s\n", out->c_str(), r.tensors, r.mxfp4,
                         r.bytes / 1048576.0, mt.tokenizer ? (", tokenizer " + mt.path).c_str() : "");
            return 0;
          }};
}

}  // namespace mx::cli
