#include "spec/mtp_drafter.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "models/model.h"

namespace mx {

MtpDrafter::MtpDrafter(const SpecOptions& o, Model& model, KVPool& pool)
    : Drafter(o, model.config().vocab_size), model_(model), pool_(pool), D_(model.config().hidden_size) {
  MX_CHECK(model.num_mtp_layers() > 0,
           "--speculative mtp: {} has no MTP (nextn) layer (num_nextn_predict_layers = 0); use "
           "--speculative ngram, or add a trained head (tools/train_mtp_head.py)",
           model.config().architecture);
}

void MtpDrafter::draw(SpecSeq& s, const float* lg) {
  if (!s.draft_sampler) {
    s.draft->push_back(argmax(lg, vocab_));
    return;
  }
  // Penalties would need the draft's own history; drafting without it only
  // lowers acceptance (verification uses the true history).
  const size_t off = s.q->size();
  s.q->resize(off + vocab_);
  float* q = s.q->data() + off;
  s.draft_sampler->probs(lg, {}, q);
  s.draft->push_back(sample_categorical({q, size_t(vocab_)}, s.draft_sampler->rng().uniform()));
}

void MtpDrafter::draft_tokens(std::span<SpecSeq> seqs, const float* hidden) {
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
  logits_.resize(batch_.logit_rows.size() * size_t(vocab_));
  model_.forward_mtp(0, batch_, pool_, prev_.data(), logits_.data(), hidden_out_.data());
  // Chain: the next slot takes the last draft and the MTP layer's own output hidden.
  for (int depth = 1;; ++depth) {
    next_.clear();
    next_pos_.clear();
    next_prev_.clear();
    for (size_t a = 0, lrow = 0, trow = 0; a < active_.size(); ++a) {
      SpecSeq& s = seqs[active_[a]];
      const BatchSeq& bs = batch_.seqs[a];
      trow += bs.n_tokens;  // past this sequence's last row
      if (s.want < depth) continue;  // no logits row: it wanted no draft
      draw(s, logits_.data() + (lrow++) * vocab_);
      // Room for the next MTP slot; without it the draft stays shorter.
      const int pos = bs.start_pos + bs.n_tokens;
      if (s.want == depth || !s.kv->reserve(pool_, pos + 1)) continue;
      next_.push_back(active_[a]);
      next_pos_.push_back(pos);
      next_prev_.insert(next_prev_.end(), hidden_out_.begin() + (trow - 1) * D_, hidden_out_.begin() + trow * D_);
    }
    if (next_.empty()) return;
    batch_.clear();
    for (size_t j = 0; j < next_.size(); ++j) batch_.add(seqs[next_[j]].kv, &seqs[next_[j]].draft->back(), 1, next_pos_[j], true);
    active_.swap(next_);
    prev_.swap(next_prev_);
    hidden_out_.resize(active_.size() * size_t(D_));
    logits_.resize(active_.size() * size_t(vocab_));
    model_.forward_mtp(0, batch_, pool_, prev_.data(), logits_.data(), hidden_out_.data());
  }
}

}  // namespace mx
