// mxserve convert: write a checkpoint as GGUF so llama.cpp can run the same model.
#include <cstdio>

#include "cli/commands.h"
#include "io/gguf_model.h"
#include "models/model.h"

namespace mx::cli {

Command add_convert(CLI::App& app) {
  auto* s = app.add_subcommand("convert", "Convert a checkpoint (HF directory) to a GGUF file for llama.cpp");
  auto in = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  auto type = std::make_shared<std::string>("bf16");
  s->add_option("--model", *in, "Input model (HF directory, possibly MXFP4-quantized by mxserve quantize)")->required();
  s->add_option("--out", *out, "Output .gguf file")->required();
  s->add_option("--type", *type,
                "f32 | f16 | bf16: weights of rank >= 2 in that type (1-D in f32); mxfp4: the Linear layers "
                "mxserve quantize would quantize in MXFP4 (llama.cpp block_mxfp4), the rest as stored")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "mxfp4"}));
  return {s, [=] {
            const Checkpoint ck = load_checkpoint(*in);
            const ConvertReport r = write_gguf_checkpoint(ck.config, *ck.tensors, ck.hf_dir, *out, gguf_out_type(*type));
            std::fprintf(stderr, "wrote %s: %d tensors (%d MXFP4), %.1f MiB\n", out->c_str(), r.tensors, r.mxfp4,
                         r.bytes / 1048576.0);
            return 0;
          }};
}

}  // namespace mx::cli
