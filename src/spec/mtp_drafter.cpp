#include "spec/mtp_drafter.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "models/model.h"

namespace mx {

MtpDrafter::MtpDrafter(const SpecOptions& o, Model& model, KVPool& pool)
    : opts_(o), model_(model), pool_(pool), D_(model.config().hidden_size), V_(model.config().vocab_size) {
  MX_CHECK(model.num_mtp_layers() > 0,
           "--speculative mtp: {} has no MTP (nextn) layer (num_nextn_predict_layers = 0); use "
           "--speculative ngram, or add a trained head (tools/train_mtp_head.py)",
           model.config().architecture);
}

void MtpDrafter::draw(SpecSeq& s, const float* lg) {
  if (!s.draft_sampler) {
    s.draft->push_back(argmax(lg, V_));
    return;
  }
  // Penalties would need the draft's own history; drafting without it only
  // lowers acceptance (verification uses the true history).
  const size_t off = s.q->size();
  s.q->resize(off + V_);
  float* q = s.q->data() + off;
  s.draft_sampler->probs(lg, {}, q);
  s.draft->push_back(sample_categorical({q, size_t(V_)}, s.draft_sampler->rng().uniform()));
}

void MtpDrafter::propose(std::span<SpecSeq> seqs, const float* hidden) {
  for (SpecSeq& s : seqs) {
    s.draft->clear();
    s.q->clear();
  }
  // Catch-up: MTP slots of every position the target verified this step.
  batch_.clear();
  active_.clear();
  int T = 0;
  for (int i = 0; i < int(seqs.size()); ++i)
    if (seqs[i].n > 0) T += seqs[i].n;
  if (T == 0) return;
  prev_.resize(size_t(T) * D_);
  for (int i = 0, row = 0; i < int(seqs.size()); ++i) {
    SpecSeq& s = seqs[i];
    if (s.n <= 0) continue;
    MX_CHECK(int(s.tokens->size()) > s.start + s.n, "MTP drafter: the token after position {} is unknown",
             s.start + s.n - 1);
    batch_.add(s.kv, s.tokens->data() + s.start + 1, s.n, s.start, s.want > 0);
    std::memcpy(prev_.data() + size_t(row) * D_, hidden + size_t(s.hidden_row) * D_, size_t(s.n) * D_ * 4);
    row += s.n;
    active_.push_back(i);
  }
  hidden_out_.resize(size_t(T) * D_);
  logits_.resize(batch_.logit_rows.size() * size_t(V_));
  model_.forward_mtp(0, batch_, pool_, prev_.data(), logits_.data(), hidden_out_.data());
  // Chain: the next slot takes the last draft and the MTP layer's own output hidden.
  for (int depth = 1;; ++depth) {
    Batch& b = batch_;
    // Gather the rows that drafted (the last row of each wanting sequence).
    std::vector<int>& prev_active = active_;
    int lrow = 0, trow = 0;
    std::vector<int> next;
    std::vector<float> next_prev;
    for (size_t a = 0; a < prev_active.size(); ++a) {
      SpecSeq& s = seqs[prev_active[a]];
      const int n = b.seqs[a].n_tokens;
      trow += n;
      if (s.want < depth) continue;
      draw(s, logits_.data() + size_t(lrow++) * V_);
      if (s.want == depth) continue;
      // Room for the next MTP slot; without it the draft stays shorter.
      const int pos = b.seqs[a].start_pos + n;
      if (!s.kv->reserve(pool_, pos + 1)) continue;
      next.push_back(prev_active[a]);
      next_prev.insert(next_prev.end(), hidden_out_.begin() + size_t(trow - 1) * D_,
                       hidden_out_.begin() + size_t(trow) * D_);
    }
    if (next.empty()) return;
    // Positions of the next slots, read before the batch is rebuilt.
    std::vector<int> pos(next.size());
    for (size_t j = 0, a = 0; j < next.size(); ++j) {
      while (prev_active[a] != next[j]) ++a;
      pos[j] = b.seqs[a].start_pos + b.seqs[a].n_tokens;
    }
    b.clear();
    for (size_t j = 0; j < next.size(); ++j) {
      SpecSeq& s = seqs[next[j]];
      b.add(s.kv, &s.draft->back(), 1, pos[j], true);
    }
    active_ = std::move(next);
    prev_ = std::move(next_prev);
    hidden_out_.resize(active_.size() * size_t(D_));
    logits_.resize(active_.size() * size_t(V_));
    model_.forward_mtp(0, b, pool_, prev_.data(), logits_.data(), hidden_out_.data());
  }
}

}  // namespace mx
