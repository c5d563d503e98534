#include "devtools/mtp_data.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/atomic_output.h"
#include "core/error.h"
#include "engine/engine.h"
#include "sampling/sampling.h"
#include "formats/safetensors.h"

namespace mx {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Runs each request to completion in one engine and appends what it generated.
void run_all(Engine& e, std::vector<std::vector<int32_t>>& seqs, const std::vector<SamplingParams>& sp,
             const std::vector<int>& max_tokens) {
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (max_tokens[i] <= 0) continue;
    GenerationRequest r;
    r.prompt = seqs[i];
    r.sampling = sp[i];
    r.max_tokens = max_tokens[i];
    r.ignore_eos = true;
    std::vector<int32_t>* out = &seqs[i];
    e.submit(std::move(r), [out](const TokenEvent& ev) {
      if (ev.token >= 0) out->push_back(ev.token);
      if (ev.finished && ev.finish_reason != FinishReason::Length)
        fail("mtp-data: a generation ended with '{}'", describe(ev.finish_reason, ev.error));
    });
  }
  e.run_until_idle();
}
}  // namespace

void MtpDataOptions::validate(const ModelConfig& c) const {
  MX_CHECK(sequences >= 1 && sequences <= 1 << 16, "mtp-data: sequences must be in [1, 65536], got {}", sequences);
  MX_CHECK(length >= 16 && length <= c.max_position_embeddings,
           "mtp-data: length must be in [16, {}] (the model's context), got {}", c.max_position_embeddings, length);
  MX_CHECK(top_k >= 1 && top_k <= std::min(1024, c.vocab_size), "mtp-data: top-k must be in [1, {}], got {}",
           std::min(1024, c.vocab_size), top_k);
  MX_CHECK(max_running >= 1 && max_running <= 256, "mtp-data: max_running must be in [1, 256]");
  const double bytes = double(sequences) * length * (c.hidden_size * 4.0 + top_k * 8.0 + 8.0);
  MX_CHECK(bytes <= double(size_t(8) << 30), "mtp-data: {} sequences x {} tokens would take {:.1f} GiB (limit 8)",
           sequences, length, bytes / double(size_t(1) << 30));
}

MtpDataStats write_mtp_data(std::unique_ptr<Model> model, const MtpDataOptions& o, const std::string& out) {
  const ModelConfig c = model->config();
  o.validate(c);
  const int N = o.sequences, L = o.length, D = c.hidden_size, V = c.vocab_size, K = o.top_k;
  MtpDataStats st;

  // 1. Generation: prompts, the sampled part, then the greedy rest.
  auto t0 = Clock::now();
  Rng rng(o.seed);
  std::vector<std::vector<int32_t>> seqs(N);
  std::vector<SamplingParams> sampled(N), greedy(N);
  std::vector<int> n_sampled(N), n_greedy(N);
  for (int i = 0; i < N; ++i) {
    if (c.bos_token_id >= 0) seqs[i].push_back(c.bos_token_id);
    seqs[i].push_back(int32_t(rng.next_u64() % uint64_t(V)));
    const int rest = L - int(seqs[i].size());
    const int kind = i % 4;  // 0: T=1, 1: T=0.7, 2: greedy after 8, 3: greedy after 32
    sampled[i].temperature = kind == 1 ? 0.7f : 1.0f;
    sampled[i].seed = o.seed * 1000003 + uint64_t(i);
    greedy[i].temperature = 0;
    n_sampled[i] = kind < 2 ? rest : std::min(rest, kind == 2 ? 8 : 32);
    n_greedy[i] = rest - n_sampled[i];
  }
  EngineOptions eo;
  eo.max_running = o.max_running;
  eo.prefix_cache = false;
  eo.max_queue = N;  // every sequence is submitted before the engine runs
  Engine engine(std::move(model), eo);
  run_all(engine, seqs, sampled, n_sampled);
  run_all(engine, seqs, greedy, n_greedy);
  st.generate_seconds = since(t0);

  // 2. One forward per sequence: hidden states and top-k logits at every position.
  t0 = Clock::now();
  Model& m = engine.model();
  std::vector<OwnedTensor> keep;
  keep.reserve(5);
  keep.push_back(OwnedTensor::make(DType::I32, {N, L}));
  keep.push_back(OwnedTensor::make(DType::F32, {N, L, D}));
  keep.push_back(OwnedTensor::make(DType::I32, {N, L, K}));
  keep.push_back(OwnedTensor::make(DType::F32, {N, L, K}));
  keep.push_back(OwnedTensor::make(DType::F32, {N, L}));
  auto* tok = static_cast<int32_t*>(keep[0].t.data);
  auto* hid = static_cast<float*>(keep[1].t.data);
  auto* tid = static_cast<int32_t*>(keep[2].t.data);
  auto* tlg = static_cast<float*>(keep[3].t.data);
  auto* lse = static_cast<float*>(keep[4].t.data);
  const int chunk = 128;
  KVPool pool(m.kv_layout(), (L + 15) / 16, 16, m.backend());
  std::vector<float> logits(size_t(chunk) * V);
  // With an MTP layer, the engine's own MTP prediction at every row (a check for
  // the trainer: its forward with the checkpoint's MTP weights must agree).
  const bool has_mtp = m.num_mtp_layers() > 0;
  OwnedTensor mtp_top1 = OwnedTensor::make(DType::I32, {has_mtp ? N : 0, L});
  std::vector<int32_t> order(V);
  Batch b;
  for (int i = 0; i < N; ++i) {
    MX_CHECK(int(seqs[i].size()) == L, "mtp-data: sequence {} has {} tokens, not {}", i, seqs[i].size(), L);
    std::copy(seqs[i].begin(), seqs[i].end(), tok + size_t(i) * L);
    SeqKV kv;
    MX_CHECK(kv.reserve(pool, L), "mtp-data: KV pool too small");
    for (int s = 0; s < L; s += chunk) {
      const int n = std::min(chunk, L - s);
      b.clear();
      b.add(&kv, seqs[i].data() + s, n, s, false);
      for (int r = 0; r < n; ++r) b.logit_rows.push_back(r);
      m.forward(b, pool, logits.data(), hid + (size_t(i) * L + s) * D);
      for (int r = 0; r < n; ++r) {
        const float* lg = logits.data() + size_t(r) * V;
        const size_t row = size_t(i) * L + s + r;
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + K, order.end(), [lg](int32_t a, int32_t b) {
          return lg[a] > lg[b] || (lg[a] == lg[b] && a < b);
        });
        const float mx = lg[order[0]];
        double sum = 0;
        for (int v = 0; v < V; ++v) sum += std::exp(double(lg[v]) - mx);
        lse[row] = mx + float(std::log(sum));
        for (int k = 0; k < K; ++k) tid[row * K + k] = order[k], tlg[row * K + k] = lg[order[k]];
      }
    }
    if (has_mtp) {  // row t: token t+1 and the hidden state of t, at position t
      auto* top1 = static_cast<int32_t*>(mtp_top1.t.data) + size_t(i) * L;
      top1[L - 1] = -1;
      for (int s = 0; s < L - 1; s += chunk) {
        const int n = std::min(chunk, L - 1 - s);
        b.clear();
        b.add(&kv, seqs[i].data() + s + 1, n, s, false);
        for (int r = 0; r < n; ++r) b.logit_rows.push_back(r);
        m.forward_mtp(0, b, pool, hid + (size_t(i) * L + s) * D, logits.data());
        for (int r = 0; r < n; ++r) top1[s + r] = argmax(logits.data() + size_t(r) * V, V);
      }
    }
    kv.release(pool);
  }
  st.forward_seconds = since(t0);
  st.tokens = int64_t(N) * L;

  std::vector<NamedTensor> list = {{"tokens", keep[0].t}, {"hidden", keep[1].t}, {"topk_ids", keep[2].t},
                                   {"topk_logits", keep[3].t}, {"lse", keep[4].t}};
  if (has_mtp) list.push_back({"mtp_top1", mtp_top1.t});
  std::map<std::string, std::string> meta = {
      {"format", "mxserve-mtp-data"}, {"architecture", c.architecture}, {"hidden_size", std::to_string(D)},
      {"vocab_size", std::to_string(V)}, {"num_hidden_layers", std::to_string(c.num_hidden_layers)},
      {"sequences", std::to_string(N)}, {"length", std::to_string(L)}, {"top_k", std::to_string(K)},
      {"seed", std::to_string(o.seed)}, {"hidden", "after the final norm"}};
  AtomicFile f(out);  // complete or not there (a killed run leaves any previous file as it was)
  write_safetensors(f.temp_path(), list, meta);
  f.commit();
  return st;
}

}  // namespace mx
