#include "convert/quantizer.h"

#include "core/atomic_output.h"

#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/safetensors.h"
#include "models/model.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace mx {

namespace {

// Row-parallel MXFP4 quantization of a [rows, cols] weight of any float dtype.
void quantize_mxfp4(const Tensor& w, mxfp4::ScaleRule rule, OwnedTensor& packed, OwnedTensor& scales) {
  const int64_t rows = w.dim(0), cols = w.dim(1);
  packed = OwnedTensor::make(DType::U8, {rows, cols / 2});
  scales = OwnedTensor::make(DType::U8, {rows, cols / 32});
  global_pool().parallel_for(rows, [&](int64_t b, int64_t e) {
    std::vector<float> row(cols);
    for (int64_t r = b; r < e; ++r) {
      for (int64_t c = 0; c < cols; ++c) row[c] = load_as_f32(w.data, w.dtype, r * cols + c);
      mxfp4::quantize_row(row.data(), cols, packed.t.as<uint8_t>() + r * cols / 2,
                          scales.t.as<uint8_t>() + r * cols / 32, rule);
    }
  });
}

// DeepSeek-style block FP8: scale = amax / 448 per 128x128 block (zero-padded
// at the edges), stored as weight_scale_inv (a multiplier despite its name).
void quantize_fp8(const Tensor& w, OwnedTensor& q, OwnedTensor& scales) {
  const int64_t rows = w.dim(0), cols = w.dim(1), br = (rows + 127) / 128, bc = (cols + 127) / 128;
  q = OwnedTensor::make(DType::F8_E4M3, {rows, cols});
  scales = OwnedTensor::make(DType::F32, {br, bc});
  global_pool().parallel_for(br, [&](int64_t b, int64_t e) {
    std::vector<float> x;  // a block row's rows as f32, converted once
    for (int64_t i = b; i < e; ++i) {
      const int64_t r0 = i * 128, nr = std::min<int64_t>(rows - r0, 128);
      x.resize(size_t(nr * cols));
      for (int64_t k = 0; k < nr * cols; ++k) x[size_t(k)] = load_as_f32(w.data, w.dtype, r0 * cols + k);
      for (int64_t j = 0; j < bc; ++j) {
        const int64_t c0 = j * 128, c1 = std::min(cols, c0 + 128);
        float amax = 0;
        for (int64_t r = 0; r < nr; ++r)
          for (int64_t c = c0; c < c1; ++c) {
            const float a = std::fabs(x[size_t(r * cols + c)]);
            amax = a > amax ? a : amax;  // fmax's result (a NaN is skipped), without its libm call
          }
        const float s = amax > 0 ? amax / 448.0f : 1.0f;
        scales.t.as<float>()[i * bc + j] = s;
        for (int64_t r = 0; r < nr; ++r)
          for (int64_t c = c0; c < c1; ++c)
            q.t.as<uint8_t>()[(r0 + r) * cols + c] = f32_to_fp8e4m3(x[size_t(r * cols + c)] / s);
      }
    }
  });
}

json dense_config_json(const ModelConfig& c) {
  MX_CHECK(c.moe.n_routed_experts == 0 && !c.mla, "only dense imports need a synthesised config.json");
  json j = {{"architectures", {c.architecture}},
            {"model_type", "llama"},
            {"hidden_size", c.hidden_size},
            {"intermediate_size", c.intermediate_size},
            {"num_hidden_layers", c.num_hidden_layers},
            {"num_attention_heads", c.num_attention_heads},
            {"num_key_value_heads", c.num_key_value_heads},
            {"head_dim", c.head_dim},
            {"vocab_size", c.vocab_size},
            {"max_position_embeddings", c.max_position_embeddings},
            {"rms_norm_eps", c.rms_norm_eps},
            {"rope_theta", c.rope_theta},
            {"hidden_act", "silu"},
            {"tie_word_embeddings", c.tie_word_embeddings},
            {"bos_token_id", c.bos_token_id},
            {"eos_token_id", c.eos_token_ids},
            {"torch_dtype", "float32"}};
  return j;
}

}  // namespace

QuantizeReport quantize_checkpoint(const std::string& in, const std::string& out_dir,
                                   const QuantizeOptions& opts) {
  MX_CHECK(opts.method != QuantMethod::None, "quantize: no format given");
  check_output_target(out_dir, opts.force, in);
  Checkpoint ck = load_checkpoint(in);
  MX_CHECK(ck.config.quant.method == QuantMethod::None, "{} is already quantized ({})", in,
           ck.config.quant.method_name());
  // Binding the model first proves the checkpoint is complete and tells which
  // tensors are Linear weights (BoundParam::linear).
  auto model = build_model(ck);
  std::map<std::string, std::string> linear_of;  // weight tensor name -> Linear layer name
  for (const auto& b : model->weight_map())
    if (!b.linear.empty()) linear_of[b.checkpoint_name] = b.linear;

  QuantConfig qc;
  qc.method = opts.method;
  if (opts.default_excludes)
    qc.exclude = default_excludes(ck.config.num_hidden_layers, ck.config.num_nextn_predict_layers);
  QuantizeReport rep;
  const TensorStore& store = *ck.tensors;
  for (const auto& p : opts.exclude) {
    const std::string entry = exclude_entry(p);
    bool hit = false;
    for (const auto& name : store.names()) {
      auto it = linear_of.find(name);
      hit |= exclude_matches(entry, name) || (it != linear_of.end() && exclude_matches(entry, it->second));
      if (hit) break;
    }
    if (!hit) {
      std::string msg = fmt::format("exclude pattern '{}' matches no tensor or layer of {}", p, in);
      MX_CHECK(!opts.strict, "{}", msg);
      rep.warnings.push_back(msg);
    }
    qc.exclude.push_back(entry);
  }

  std::deque<OwnedTensor> owned;
  std::vector<NamedTensor> out;
  for (const auto& name : store.names()) {
    const Tensor& t = store.get(name);
    rep.bytes_in += t.nbytes();
    auto it = linear_of.find(name);
    if (it == linear_of.end()) {
      out.push_back({name, t});
      continue;
    }
    const std::string& layer = it->second;
    if (!qc.quantized(layer)) {
      ++rep.kept;
      rep.excluded.push_back(layer);
      out.push_back({name, t});
      continue;
    }
    ++rep.quantized;
    OwnedTensor& a = owned.emplace_back();
    OwnedTensor& s = owned.emplace_back();
    if (opts.method == QuantMethod::Mxfp4) {
      MX_CHECK(t.dim(1) % 32 == 0,
               "{}: in_features {} is not a multiple of 32, so it cannot be MXFP4; keep it "
               "unquantized with --exclude {}",
               layer, t.dim(1), layer);
      quantize_mxfp4(t, opts.scale_rule, a, s);
      out.push_back({name, a.t});
      out.push_back({layer + ".weight_scale", s.t});
    } else {
      quantize_fp8(t, a, s);
      out.push_back({name, a.t});
      out.push_back({layer + ".weight_scale_inv", s.t});
    }
  }
  for (const auto& nt : out) rep.bytes_out += nt.t.nbytes();

  AtomicDir dir(out_dir);
  const std::string& tmp = dir.path();
  json cfg;
  if (!ck.hf_dir.empty()) {
    std::ifstream cin(fs::path(ck.hf_dir) / "config.json");
    cfg = json::parse(cin);
    // Tokenizer and generation files travel with the weights.
    for (const auto& e : fs::directory_iterator(ck.hf_dir)) {
      const std::string fn = e.path().filename().string();
      if (e.is_regular_file() && e.path().extension() != ".safetensors" && fn != "config.json" &&
          fn != "model.safetensors.index.json")
        fs::copy_file(e.path(), fs::path(tmp) / fn, fs::copy_options::overwrite_existing);
    }
  } else {
    cfg = dense_config_json(ck.config);
  }
  cfg["quantization_config"] = quant_config_json(qc);
  write_safetensors_sharded(tmp, out, opts.max_shard_bytes, {{"format", "pt"}});
  {
    std::ofstream cout(fs::path(tmp) / "config.json");
    cout << cfg.dump(2) << "\n";
    MX_CHECK(bool(cout.flush()), "cannot write {}/config.json", out_dir);
  }
  dir.commit();
  return rep;
}

}  // namespace mx
