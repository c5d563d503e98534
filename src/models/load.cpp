// Format detection and architecture dispatch for load_model().
#include <filesystem>
#include <cstdio>
#include <regex>
#include <set>

#include "core/error.h"
#include "formats/gguf_model.h"
#include "formats/llama2c.h"
#include "formats/safetensors.h"
#include "models/families.h"
#include "models/model.h"

namespace fs = std::filesystem;

namespace mx {

void Batch::add(SeqKV* kv, const int32_t* toks, int n, int start_pos, bool want_logits) {
  seqs.push_back({n, start_pos, kv});
  tokens.insert(tokens.end(), toks, toks + n);
  if (want_logits) logit_rows.push_back(int32_t(tokens.size()) - 1);
}

namespace {
std::unique_ptr<Model> build(const ModelConfig& c, std::shared_ptr<TensorStore> store,
                             const LoadOptions& opts) {
  switch (c.arch) {
    case Arch::Llama:
    case Arch::Qwen2:
    case Arch::Qwen3: return build_llama(c, std::move(store), opts);
    case Arch::Glm4Moe: return build_glm4_moe(c, std::move(store), opts);
    case Arch::DeepseekV3: return build_deepseek_v3(c, std::move(store), opts);
    case Arch::Qwen3Moe: return build_qwen3_moe(c, std::move(store), opts);
  }
  fail("no model implementation for {}", c.architecture);
}
}  // namespace

Checkpoint load_checkpoint(const std::string& path) {
  if (!fs::exists(path)) fail("model path {} does not exist", path);
  Checkpoint ck;
  if (fs::is_directory(path)) {
    fs::path cfg = fs::path(path) / "config.json";
    if (!fs::exists(cfg)) fail("{} has no config.json", path);
    ck.config = load_hf_config(cfg.string());
    ck.tensors = std::make_shared<TensorStore>(load_safetensors(path));
    ck.hf_dir = path;
    return ck;
  }
  if (is_gguf_file(path)) {
    GgufCheckpoint g = read_gguf_checkpoint(path);
    ck.config = std::move(g.config);
    ck.tensors = std::move(g.tensors);
    ck.gguf_path = path;
    return ck;
  }
  if (path.size() > 12 && path.substr(path.size() - 12) == ".safetensors")
    fail("{}: a bare .safetensors file has no config; pass the model directory", path);
  if ((path.size() > 4 && path.substr(path.size() - 4) == ".bin") || looks_like_llama2c(path)) {
    ImportedModel m = import_llama2c(path);
    ck.config = m.config;
    ck.tensors = std::make_shared<TensorStore>(std::move(m.tensors));
    return ck;
  }
  fail("{}: not a model directory (config.json + safetensors), a GGUF file nor a llama2.c checkpoint", path);
}

std::unique_ptr<Model> build_model(const Checkpoint& ck, const LoadOptions& opts) {
  try {
    return build(ck.config, ck.tensors, opts);
  } catch (const Error& e) {
    if (ck.hf_dir.empty() && ck.gguf_path.empty()) throw;
    fail("{}: {}", ck.hf_dir.empty() ? ck.gguf_path : ck.hf_dir, e.what());
  }
}

void attach_mtp_head(Checkpoint& ck, const std::string& path) {
  ModelConfig& c = ck.config;
  // A model with MTP layers gets the head's tensors in place of its own of the
  // same names (a retrained layer); one without gets the head as new layers.
  const int have = c.num_nextn_predict_layers;
  auto head = std::make_shared<TensorStore>(load_safetensors(path));
  std::set<int> layers;
  static const std::regex name(R"(model\.layers\.(\d+)\..+)");
  for (const std::string& n : head->names()) {
    std::smatch m;
    MX_CHECK(std::regex_match(n, m, name), "--mtp-head {}: tensor '{}' is not an MTP layer tensor (model.layers.N.*)",
             path, n);
    const int l = std::stoi(m[1].str());
    MX_CHECK(l >= c.num_hidden_layers && l < c.num_hidden_layers + 8,
             "--mtp-head {}: tensor '{}' is not an MTP layer of a {}-layer model (layers {}..)", path, n,
             c.num_hidden_layers, c.num_hidden_layers);
    layers.insert(l);
    if (have) {
      MX_CHECK(l < c.num_hidden_layers + have && ck.tensors->contains(n),
               "--mtp-head {}: tensor '{}' is not in the checkpoint's MTP layer(s) {}..{}, so it replaces nothing",
               path, n, c.num_hidden_layers, c.num_hidden_layers + have - 1);
      ck.tensors->replace(n, head->get(n), head->origin(n));
    } else {
      ck.tensors->add(n, head->get(n), head->origin(n));
    }
  }
  MX_CHECK(!layers.empty(), "--mtp-head {}: no tensors", path);
  ck.tensors->keep_alive(head);
  if (have) {
    std::fprintf(stderr, "--mtp-head %s: %zu tensors replace the checkpoint's MTP layer tensors of the same names\n",
                 path.c_str(), head->size());
    return;
  }
  MX_CHECK(*layers.rbegin() - c.num_hidden_layers + 1 == int(layers.size()),
           "--mtp-head {}: MTP layers must be numbered from {} without gaps", path, c.num_hidden_layers);
  c.num_nextn_predict_layers = int(layers.size());
}

static Checkpoint dummy_checkpoint(const std::string& path, const std::string& dtype, const std::string& overrides) {
  const fs::path cfg = fs::is_directory(path) ? fs::path(path) / "config.json" : fs::path(path);
  MX_CHECK(fs::is_regular_file(cfg), "--load-format dummy: {} is not a config.json nor a directory holding one", path);
  Checkpoint ck;
  ck.config = load_hf_config(cfg.string(), overrides);
  ck.tensors = std::make_shared<TensorStore>();
  ModelConfig& c = ck.config;
  if (dtype.empty() || dtype == "bf16" || dtype == "f32") {
    if (!dtype.empty()) c.quant = {};  // "" keeps the config's quantization_config
  } else if (dtype == "mxfp4" || dtype == "fp8") {
    c.quant.method = dtype == "mxfp4" ? QuantMethod::Mxfp4 : QuantMethod::Fp8Block;
    c.quant.exclude = default_excludes(c.num_hidden_layers, c.num_nextn_predict_layers);
  } else {
    fail("--dummy-dtype {}: expected bf16, f32, fp8 or mxfp4", dtype);
  }
  if (fs::is_directory(path)) ck.hf_dir = path;
  return ck;
}

Checkpoint open_checkpoint(const std::string& path, const LoadOptions& opts) {
  MX_CHECK(opts.load_format == "auto" || opts.load_format == "dummy", "--load-format {}: expected auto or dummy",
           opts.load_format);
  if (opts.load_format == "dummy") {
    MX_CHECK(opts.mtp_head.empty(), "--mtp-head does not apply to --load-format dummy");
    return dummy_checkpoint(path, opts.dummy_dtype, opts.hf_overrides);
  }
  MX_CHECK(opts.dummy_dtype.empty() && opts.hf_overrides.empty(),
           "--dummy-dtype and --hf-overrides apply to --load-format dummy only");
  Checkpoint ck = load_checkpoint(path);
  if (!opts.mtp_head.empty()) attach_mtp_head(ck, opts.mtp_head);
  return ck;
}

std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& opts) {
  return build_model(open_checkpoint(path, opts), opts);
}

}  // namespace mx
