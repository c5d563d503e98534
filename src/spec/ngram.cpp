#include "spec/ngram.h"

#include <algorithm>

namespace mx {

void ngram_lookup(std::span<const int32_t> t, int n_max, int n_min, int k, std::vector<int32_t>& out) {
  out.clear();
  const int L = int(t.size());
  if (k <= 0) return;
  for (int n = std::min(n_max, L - 1); n >= std::max(n_min, 1); --n) {
    const int32_t* suffix = t.data() + L - n;
    // Latest match first: recent context predicts best. A match must leave at
    // least one token after it, so it starts at most at L - n - 1.
    for (int s = L - n - 1; s >= 0; --s) {
      if (!std::equal(suffix, suffix + n, t.data() + s)) continue;
      const int from = s + n, m = std::min(k, L - from);
      out.assign(t.begin() + from, t.begin() + from + m);
      return;
    }
  }
}

void NgramDrafter::draft_tokens(std::span<SpecSeq> seqs, const float*) {
  for (SpecSeq& s : seqs) {
    s.q->clear();
    if (s.want > 0)
      ngram_lookup(*s.tokens, opts_.ngram_max, opts_.ngram_min, s.want, *s.draft);
    else
      s.draft->clear();
  }
}

}  // namespace mx
