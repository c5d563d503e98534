#include "spec/verify.h"

#include <algorithm>

#include "spec/draft_state.h"

namespace mx {

int verify_drafts(Sampler& s, const float* rows, std::span<const int32_t> draft, const float* q,
                  const std::vector<int32_t>& history, const EmitToken& emit, VerifyScratch& sc,
                  const PrepareRow& prepare) {
  const int64_t V = s.vocab_size();
  const int k = int(draft.size());
  if (s.params().greedy()) {
    for (int i = 0; i <= k; ++i) {
      if (prepare) prepare(i);
      const int32_t t = s.sample(rows + i * V, history);
      if (!emit(t, i) || i == k || t != draft[i]) return i;
    }
    return k;
  }
  sc.p.resize(V);
  sc.w.resize(V);
  for (int i = 0; i < k; ++i) {
    if (prepare) prepare(i);
    s.probs(rows + i * V, history, sc.p.data());
    const int32_t d = draft[i];
    const float* qi = q ? q + i * V : nullptr;
    const float qd = qi ? qi[d] : 1.0f;
    // Accept with probability min(1, p/q): u < p/q, written without the division.
    if (qd > 0 && s.rng().uniform() * qd < sc.p[d]) {
      if (!emit(d, i)) return i + 1;
      continue;
    }
    double mass = 0;
    for (int64_t v = 0; v < V; ++v) {
      const float qv = qi ? qi[v] : (v == d ? 1.0f : 0.0f);
      sc.w[v] = std::max(0.0f, sc.p[v] - qv);
      mass += sc.w[v];
    }
    // p <= q everywhere means p == q (both sum to 1), where rejection has
    // probability 0; rounding can still land here, and p is then the residual.
    const std::vector<float>& from = mass > 0 ? sc.w : sc.p;
    emit(sample_categorical(from, s.rng().uniform()), i);
    return i;
  }
  if (prepare) prepare(k);
  emit(s.sample(rows + k * V, history), k);
  return k;
}

int verify_drafts(Sampler& s, const float* rows, const DraftState& d, int k, const std::vector<int32_t>& history,
                  const EmitToken& emit, VerifyScratch& sc, const PrepareRow& prepare) {
  return verify_drafts(s, rows, {d.draft_.data(), size_t(k)}, d.q_.empty() ? nullptr : d.q_.data(), history, emit,
                       sc, prepare);
}

}  // namespace mx
