#include "convert/quality.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "backends/cpu/exact_products.h"
#include "engine/generate.h"
#include "models/decoder.h"
#include "quant/dequantize.h"

namespace mx {

namespace {
// log-softmax of a row, in double.
void log_softmax(const float* x, int64_t n, std::vector<double>& out) {
  out.resize(n);
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, double(x[i]));
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(double(x[i]) - mx);
  const double lse = mx + std::log(s);
  for (int64_t i = 0; i < n; ++i) out[i] = double(x[i]) - lse;
}
}  // namespace

QualityReport measure_quality(Model& ref, Model& quant, const std::vector<std::vector<int32_t>>& seqs,
                              bool exact_reference) {
  MX_CHECK(ref.config().vocab_size == quant.config().vocab_size, "quality: models have different vocabularies");
  MX_CHECK(!seqs.empty(), "quality: no sequences to measure on");
  const int64_t V = ref.config().vocab_size;
  QualityReport r;
  std::vector<double> kls, lr, lq;
  double nll_ref = 0, nll_q = 0;
  int64_t agree = 0, scored = 0;
  for (const auto& s : seqs) {
    if (s.size() < 2) continue;
    std::optional<ExactCpuProducts> exact;
    if (exact_reference) exact.emplace();
    const std::vector<float> a = prompt_logits(ref, s, true);
    exact.reset();
    const std::vector<float> b = prompt_logits(quant, s, true);
    for (size_t t = 0; t < s.size(); ++t) {
      const float* ra = a.data() + t * V;
      const float* rb = b.data() + t * V;
      log_softmax(ra, V, lr);
      log_softmax(rb, V, lq);
      double kl = 0;
      for (int64_t i = 0; i < V; ++i) kl += std::exp(lr[i]) * (lr[i] - lq[i]);
      kls.push_back(std::max(kl, 0.0));
      agree += std::max_element(ra, ra + V) - ra == std::max_element(rb, rb + V) - rb;
      if (t + 1 < s.size()) {
        nll_ref -= lr[s[t + 1]];
        nll_q -= lq[s[t + 1]];
        ++scored;
      }
    }
    ++r.sequences;
  }
  MX_CHECK(!kls.empty(), "quality: every sequence is shorter than 2 tokens");
  r.positions = int64_t(kls.size());
  double sum = 0;
  for (double k : kls) sum += k;
  r.kl_mean = sum / kls.size();
  std::sort(kls.begin(), kls.end());
  r.kl_max = kls.back();
  r.kl_p99 = kls[std::min(kls.size() - 1, size_t(kls.size() * 0.99))];
  r.top1_agreement = double(agree) / r.positions;
  r.ppl_ref = std::exp(nll_ref / std::max<int64_t>(scored, 1));
  r.ppl_quant = std::exp(nll_q / std::max<int64_t>(scored, 1));
  return r;
}

std::vector<LayerError> weight_errors(const Model& ref, const Model& quant) {
  auto* dr = dynamic_cast<const DecoderModel*>(&ref);
  auto* dq = dynamic_cast<const DecoderModel*>(&quant);
  MX_CHECK(dr && dq, "weight errors need decoder models");
  std::map<std::string, const BoundParam*> qparam;
  for (const auto& b : quant.weight_map())
    if (!b.linear.empty() && b.params > 0) qparam[b.linear] = &b;
  std::vector<LayerError> out;
  for (const auto& b : ref.weight_map()) {
    if (b.linear.empty() || b.params == 0) continue;
    auto it = qparam.find(b.linear);
    if (it == qparam.end() || it->second->dtype == b.dtype) continue;
    const Tensor& w = dr->store().get(b.linear + ".weight");
    Tensor q = dq->store().get(b.linear + ".weight");
    // The quantized weight is read as one of the reference's shape: the same rows and elements, or
    // two different models (a quantized copy of another checkpoint).
    MX_CHECK(it->second->params == b.params && w.ndim == 2 && q.ndim == 2 && q.dim(0) == w.dim(0),
             "quality: {} is {} ({} parameters) in the reference and {} ({} parameters) in the model compared: "
             "not a quantized copy of the reference", b.linear, b.shape, b.params, it->second->shape,
             it->second->params);
    const Tensor* sc =
        dq->store().find(b.linear + (it->second->dtype == DType::MXFP4 ? ".weight_scale" : ".weight_scale_inv"));
    Tensor logical(it->second->dtype, w.dims(), q.data);
    logical.scales = sc ? sc->data : nullptr;
    OwnedTensor d = dequantize_f32(logical);
    double num = 0, den = 0;
    for (int64_t i = 0; i < w.numel(); ++i) {
      const double a = load_as_f32(w.data, w.dtype, i), e = d.t.as<float>()[i] - a;
      num += e * e;
      den += a * a;
    }
    out.push_back({b.linear, den > 0 ? std::sqrt(num / den) : 0.0});
  }
  return out;
}

std::vector<std::vector<int32_t>> self_generated_sequences(Model& ref, int count, int length, uint64_t seed) {
  MX_CHECK(count > 0 && length > 1, "quality: need at least one sequence of 2+ tokens");
  const ModelConfig& c = ref.config();
  MX_CHECK(length <= c.max_position_embeddings, "quality: --length {} exceeds the model's context of {} tokens", length,
           c.max_position_embeddings);
  const int32_t bos = c.bos_token_id >= 0 && c.bos_token_id < c.vocab_size ? c.bos_token_id : 0;
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < count; ++i) {
    GenerateOptions o;
    o.max_tokens = length - 1;
    o.sampling.temperature = 1.0f;
    o.sampling.seed = seed + i;
    o.ignore_eos = true;
    std::vector<int32_t> s = {bos};
    auto g = generate(ref, s, o);
    s.insert(s.end(), g.tokens.begin(), g.tokens.end());
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<std::vector<int32_t>> read_token_file(const std::string& path) {
  std::ifstream in(path);
  MX_CHECK(bool(in), "cannot open calibration file {}", path);
  std::vector<std::vector<int32_t>> seqs;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r,") == std::string::npos) continue;
    try {
      seqs.push_back(parse_token_ids(line));
    } catch (const Error& e) {
      fail("{}:{}: {}", path, line_no, e.what());
    }
  }
  MX_CHECK(!seqs.empty(), "calibration file {} holds no token sequences", path);
  return seqs;
}

std::string QualityReport::to_json() const {
  nlohmann::json j = {{"sequences", sequences}, {"positions", positions}, {"kl_mean", kl_mean},
                      {"kl_p99", kl_p99},       {"kl_max", kl_max},       {"top1_agreement", top1_agreement},
                      {"ppl_ref", ppl_ref},     {"ppl_quant", ppl_quant}};
  nlohmann::json l = nlohmann::json::object();
  for (const auto& e : layers) l[e.layer] = e.rel_rmse;
  j["layer_rel_rmse"] = l;
  return j.dump(2);
}

std::string QualityReport::to_text() const {
  std::string layer_summary;
  if (!layers.empty()) {
    double mean = 0, mx = 0;
    std::string worst;
    for (const auto& e : layers) {
      mean += e.rel_rmse / layers.size();
      if (e.rel_rmse > mx) mx = e.rel_rmse, worst = e.layer;
    }
    layer_summary = fmt::format("  weight rel. RMS error over {} quantized layers: mean {:.4f}, max {:.4f} ({})\n",
                                layers.size(), mean, mx, worst);
  }
  return layer_summary + fmt::format(
      "quality over {} sequences, {} positions:\n  KL(ref||quant) mean {:.5f}  p99 {:.5f}  max {:.5f} nats\n"
      "  top-1 agreement {:.2f}%\n  perplexity ref {:.3f}  quant {:.3f}  ({:+.2f}%)\n",
      sequences, positions, kl_mean, kl_p99, kl_max, 100 * top1_agreement, ppl_ref, ppl_quant,
      100 * (ppl_quant / ppl_ref - 1));
}

}  // namespace mx
