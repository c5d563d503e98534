#include "models/decoder.h"

#include <cstring>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "models/mla.h"
#include "models/moe.h"
#include "parallel/comm.h"

namespace mx {

void Model::forward_mtp(int, const Batch&, KVPool&, const float*, float*, float*) {
  fail("{} has no MTP layer", config().architecture);
}

void bind_layer_norms(WeightBinder& wb, const std::string& p, const ModelConfig& c, DecoderLayer& L) {
  L.attn_norm = bind_norm(wb, p + ".input_layernorm.weight", c.hidden_size);
  L.mlp_norm = bind_norm(wb, p + ".post_attention_layernorm.weight", c.hidden_size);
}

void bind_mtp_head(WeightBinder& wb, const std::string& p, const ModelConfig& c,
                   const DecoderModel& m, MtpLayer& mtp) {
  const int H = c.hidden_size, V = c.vocab_size;
  mtp.enorm = bind_norm(wb, p + ".enorm.weight", H);
  mtp.hnorm = bind_norm(wb, p + ".hnorm.weight", H);
  mtp.eh_proj = wb.linear(p + ".eh_proj", p + ".eh_proj", H, 2 * H);
  mtp.head_norm = bind_norm(wb, p + ".shared_head.norm.weight", H);
  mtp.embed = wb.optional(p + ".embed_tokens.weight", p + ".embed_tokens", {V, H}, MX_FLOAT_WEIGHTS);
  if (mtp.embed.empty()) mtp.embed = m.embed;
  mtp.head = wb.optional(p + ".shared_head.head.weight", p + ".shared_head.head", {V, H}, MX_FLOAT_WEIGHTS);
  if (mtp.head.empty()) mtp.head = m.lm_head;
}

void bind_decoder_layer(WeightBinder& wb, const ModelConfig& c, int index, DecoderLayer& L) {
  const std::string p = fmt::format("model.layers.{}", index);
  bind_layer_norms(wb, p, c, L);
  const ShardPlan& sp = wb.shard();
  if (c.mla)
    L.attn = std::make_unique<MlaAttention>(wb, p + ".self_attn", c);
  else
    L.attn = std::make_unique<GqaAttention>(wb, p + ".self_attn", c);
  L.attn_partial = sp.tp_on();
  if (c.is_moe_layer(index)) {
    L.ffn = std::make_unique<MoeBlock>(wb, p + ".mlp", c);
    L.ffn_partial = sp.tp_on() && !sp.ep_on();  // EP combines whole expert outputs itself
  } else {
    const bool split = sp.tp_on();
    L.ffn = std::make_unique<SwigluMlp>(wb, p + ".mlp", c.hidden_size, c.intermediate_size,
                                        split ? sp.rank : 0, split ? sp.size : 1);
    L.ffn_partial = split;
  }
}

std::unique_ptr<Model> build_decoder(const ModelConfig& c, std::shared_ptr<TensorStore> store,
                                     const LoadOptions& opts) {
  auto m = std::make_unique<DecoderModel>(c, store, opts.shard);
  WeightBinder wb(*store, c.quant);
  wb.set_shard(opts.shard.get());
  bind_embed_and_head(wb, c, *m);
  const bool vp = m->vocab_parallel();
  const int vl = vp ? c.vocab_size / opts.shard->size : c.vocab_size;
  if (vp) m->lm_head = slice_rows(m->lm_head, int64_t(vl) * opts.shard->rank, vl);
  m->layers.resize(c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) bind_decoder_layer(wb, c, l, m->layers[l]);
  m->mtp.resize(c.num_nextn_predict_layers);
  for (int i = 0; i < c.num_nextn_predict_layers; ++i) {
    const int index = c.num_hidden_layers + i;
    bind_mtp_head(wb, fmt::format("model.layers.{}", index), c, *m, m->mtp[i]);
    Tensor& head = m->mtp[i].head;
    if (vp && !head.empty() && head.shape[0] == c.vocab_size)  // its own head, not the shared one
      head = slice_rows(head, int64_t(vl) * opts.shard->rank, vl);
    bind_decoder_layer(wb, c, index, m->mtp[i].block);
  }
  m->finish(wb, opts);
  return m;
}

bool DecoderModel::vocab_parallel() const {
  return plan_ && plan_->tp_on() && cfg_.vocab_size % plan_->size == 0;
}

ThreadPool& DecoderModel::pool() const { return plan_ && plan_->pool ? *plan_->pool : global_pool(); }

KVLayout DecoderModel::kv_layout() const {
  const int n = cfg_.num_hidden_layers + int(mtp.size());
  if (cfg_.mla) return {n, cfg_.mla_cfg.kv_lora_rank + cfg_.mla_cfg.qk_rope_head_dim, 0};
  const int kv = cfg_.kv_dim() / (plan_ && plan_->tp_on() ? plan_->size : 1);  // this rank's KV heads
  return {n, kv, kv};
}

void DecoderModel::finish(WeightBinder& wb, const LoadOptions& opts) {
  // Older transformers exports carry the RoPE table; it is recomputed from config.
  wb.ignore(R"(model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq)", "recomputed from config");
  bound_ = wb.finish();
  for (const auto& b : bound_) {
    if (b.param.rfind("(", 0) == 0 || b.param.find("tied copy") != std::string::npos) continue;
    n_params_ += b.params;
    weight_bytes_ += store_->get(b.checkpoint_name).nbytes();
  }
  reserve(opts.max_batch_tokens, std::min(cfg_.max_position_embeddings, 4096));
}

size_t DecoderModel::bytes_per_token() const {
  size_t n = size_t(cfg_.hidden_size) * dtype_bits(embed.dtype) / 8 + final_norm.nbytes() + lm_head.storage_bytes();
  for (const auto& L : layers)
    n += L.attn_norm.nbytes() + L.mlp_norm.nbytes() + L.attn->bytes_per_token() + L.ffn->bytes_per_token();
  return n;
}

void DecoderModel::reserve(int T, int max_ctx) {
  const int nw = pool().size();
  size_t layer = 0;
  auto account = [&](const DecoderLayer& L) {
    layer = std::max({layer, L.attn->scratch_bytes(T, max_ctx, nw), L.ffn->scratch_bytes(T)});
  };
  for (const auto& L : layers) account(L);
  for (const auto& m : mtp) account(m.block);
  // pos + seq, then x, xn, tmp, logit rows and the MTP's embed/hidden/concat.
  size_t base = 2 * size_t(T) * 4 + 9 * size_t(T) * cfg_.hidden_size * 4 + 16 * 64;
  if (vocab_parallel()) base += 2 * size_t(T) * cfg_.vocab_size * 4 + 64;  // local + gathered logits
  arena_.reserve(base + layer);
}

int DecoderModel::check_batch(const Batch& batch, KVPool& kv, bool mtp) const {
  const int T = int(batch.tokens.size());
  MX_CHECK(T > 0, "forward: empty batch");
  int max_ctx = 0, counted = 0;
  for (const auto& s : batch.seqs) {
    MX_CHECK(s.kv && s.n_tokens > 0, "forward: sequence without tokens or KV");
    // The MTP layers' KV runs ahead of the target's while drafts chain
    // (spec/mtp_drafter.h): its caller tracks which slots are written.
    MX_CHECK(s.start_pos >= 0 && (mtp || s.start_pos <= s.kv->n_tokens),
             "forward: start_pos {} past cached positions {}", s.start_pos, s.kv->n_tokens);
    MX_CHECK(s.start_pos + s.n_tokens <= cfg_.max_position_embeddings,
             "sequence length {} exceeds the model's context of {} tokens", s.start_pos + s.n_tokens,
             cfg_.max_position_embeddings);
    MX_CHECK(s.kv->capacity(kv.block_size()) >= s.start_pos + s.n_tokens,
             "forward: KV blocks not reserved for {} positions", s.start_pos + s.n_tokens);
    max_ctx = std::max(max_ctx, s.start_pos + s.n_tokens);
    counted += s.n_tokens;
  }
  MX_CHECK(counted == T, "forward: sequences cover {} tokens, batch has {}", counted, T);
  for (int32_t tok : batch.tokens)
    MX_CHECK(tok >= 0 && tok < cfg_.vocab_size, "token id {} is outside the vocabulary [0, {})", tok,
             cfg_.vocab_size);
  for (int32_t r : batch.logit_rows) MX_CHECK(r >= 0 && r < T, "forward: logit row {} outside the batch", r);
  return max_ctx;
}

ForwardCtx DecoderModel::begin(const Batch& batch, KVPool& kv, bool mtp) {
  MX_CHECK(kv.layout().n_layers == kv_layout().n_layers && kv.layout().k_width == kv_layout().k_width &&
               kv.layout().v_width == kv_layout().v_width,
           "forward: KV pool layout does not match the model");
  const int max_ctx = check_batch(batch, kv, mtp);
  const int T = int(batch.tokens.size());
  arena_.reset();
  reserve(T, max_ctx);
  int32_t* pos = arena_.alloc<int32_t>(T);
  int32_t* seq = arena_.alloc<int32_t>(T);
  for (int s = 0, t = 0; s < int(batch.seqs.size()); ++s)
    for (int i = 0; i < batch.seqs[s].n_tokens; ++i, ++t) {
      pos[t] = batch.seqs[s].start_pos + i;
      seq[t] = s;
    }
  return ForwardCtx{batch, kv, arena_, pool(), T, pos, seq, max_ctx};
}

void DecoderModel::embed_rows(const Tensor& table, const Batch& batch, float* x) const {
  const int D = cfg_.hidden_size;
  for (size_t t = 0; t < batch.tokens.size(); ++t) {
    float* out = x + t * D;
    if (table.dtype == DType::F32) {
      std::memcpy(out, table.as<float>() + size_t(batch.tokens[t]) * D, D * sizeof(float));
    } else {
      const void* row = table.row(batch.tokens[t]);
      for (int i = 0; i < D; ++i) out[i] = load_as_f32(row, table.dtype, i);
    }
  }
}

void DecoderModel::run_layer(ForwardCtx& ctx, const DecoderLayer& L, int kv_layer, float* x,
                             float* xn, float* tmp) {
  const int T = ctx.n_tokens, D = cfg_.hidden_size;
  const size_t mark = arena_.mark();
  rmsnorm(xn, x, L.attn_norm, T, D, cfg_.rms_norm_eps);
  L.attn->forward(ctx, kv_layer, xn, tmp);
  if (L.attn_partial) plan_->comm->allreduce_sum(tmp, size_t(T) * D);
  add_inplace(x, tmp, int64_t(T) * D);
  arena_.rewind(mark);
  rmsnorm(xn, x, L.mlp_norm, T, D, cfg_.rms_norm_eps);
  L.ffn->forward(ctx, xn, tmp);
  if (L.ffn_partial) plan_->comm->allreduce_sum(tmp, size_t(T) * D);
  add_inplace(x, tmp, int64_t(T) * D);
  arena_.rewind(mark);
}

void DecoderModel::project_rows(ForwardCtx& ctx, const float* x, const std::vector<int32_t>& rows,
                                const Tensor& norm, const Tensor& head, float* logits) {
  const int R = int(rows.size()), D = cfg_.hidden_size;
  if (R == 0) return;
  float* xr = ctx.arena.alloc(size_t(R) * D);
  for (int r = 0; r < R; ++r) std::memcpy(xr + size_t(r) * D, x + size_t(rows[r]) * D, D * sizeof(float));
  if (!norm.empty()) rmsnorm(xr, xr, norm, R, D, cfg_.rms_norm_eps);
  const int64_t V = cfg_.vocab_size, Vl = head.shape[0];
  if (Vl == V) {
    matmul(logits, xr, head, R, ctx.pool);
    return;
  }
  // Vocab-parallel: each rank computes its vocab rows (every logit is one whole
  // dot product, so nothing is reduced), then all ranks gather [P][R][Vl].
  const int P = plan_->size;
  float* local = ctx.arena.alloc(size_t(R) * Vl);
  float* all = ctx.arena.alloc(size_t(P) * R * Vl);
  matmul(local, xr, head, R, ctx.pool);
  plan_->comm->allgather(local, size_t(R) * Vl * 4, all);
  for (int p = 0; p < P; ++p)
    for (int r = 0; r < R; ++r)
      std::memcpy(logits + size_t(r) * V + size_t(p) * Vl, all + (size_t(p) * R + r) * Vl, Vl * 4);
}

void DecoderModel::forward(const Batch& batch, KVPool& kv, float* logits, float* hidden) {
  ForwardCtx ctx = begin(batch, kv);
  const int T = ctx.n_tokens, D = cfg_.hidden_size;
  float* x = arena_.alloc(size_t(T) * D);
  float* xn = arena_.alloc(size_t(T) * D);
  float* tmp = arena_.alloc(size_t(T) * D);
  embed_rows(embed, batch, x);
  for (int l = 0; l < cfg_.num_hidden_layers; ++l) run_layer(ctx, layers[l], l, x, xn, tmp);
  if (hidden) {
    rmsnorm(hidden, x, final_norm, T, D, cfg_.rms_norm_eps);
    project_rows(ctx, hidden, batch.logit_rows, Tensor(), lm_head, logits);
  } else {
    project_rows(ctx, x, batch.logit_rows, final_norm, lm_head, logits);
  }
  for (const auto& s : batch.seqs) s.kv->n_tokens = std::max(s.kv->n_tokens, s.start_pos + s.n_tokens);
}

void DecoderModel::forward_mtp(int i, const Batch& batch, KVPool& kv, const float* prev_hidden,
                               float* logits, float* hidden_out) {
  MX_CHECK(i >= 0 && i < int(mtp.size()), "MTP layer {} does not exist ({} layers)", i, mtp.size());
  const MtpLayer& m = mtp[i];
  ForwardCtx ctx = begin(batch, kv, /*mtp=*/true);
  const int T = ctx.n_tokens, D = cfg_.hidden_size;
  const float eps = cfg_.rms_norm_eps;
  float* e = arena_.alloc(size_t(T) * D);
  float* h = arena_.alloc(size_t(T) * D);
  float* cat = arena_.alloc(size_t(T) * 2 * D);
  float* x = arena_.alloc(size_t(T) * D);
  float* xn = arena_.alloc(size_t(T) * D);
  float* tmp = arena_.alloc(size_t(T) * D);
  embed_rows(m.embed, batch, e);
  rmsnorm(e, e, m.enorm, T, D, eps);
  rmsnorm(h, prev_hidden, m.hnorm, T, D, eps);
  // Order [enorm(embed), hnorm(hidden)]: vLLM deepseek_mtp.py / sglang glm4_moe_nextn.py.
  for (int t = 0; t < T; ++t) {
    std::memcpy(cat + size_t(t) * 2 * D, e + size_t(t) * D, D * sizeof(float));
    std::memcpy(cat + size_t(t) * 2 * D + D, h + size_t(t) * D, D * sizeof(float));
  }
  matmul(x, cat, m.eh_proj, T, ctx.pool);
  run_layer(ctx, m.block, cfg_.num_hidden_layers + i, x, xn, tmp);
  if (hidden_out) {
    // The chained draft step consumes the state after shared_head.norm, as the
    // first step consumes the target's after model.norm (sglang deepseek_nextn.py
    // returns the normed state to its EAGLE worker).
    rmsnorm(hidden_out, x, m.head_norm, T, D, eps);
    project_rows(ctx, hidden_out, batch.logit_rows, Tensor(), m.head, logits);
  } else {
    project_rows(ctx, x, batch.logit_rows, m.head_norm, m.head, logits);
  }
}

}  // namespace mx
