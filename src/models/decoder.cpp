#include "models/decoder.h"

#include <bit>
#include <cstdio>
#include <cstring>

#include "core/thread_pool.h"
#include "models/mla.h"
#include "models/moe.h"
#include "comm/comm.h"
#include "comm/device_group.h"

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
  // The backend first: an unknown or absent one fails before any binding work.
  m->use_backend(opts.backend);
  WeightBinder wb(*store, c.quant);
  wb.set_shard(opts.shard.get());
  if (opts.load_format == "dummy") m->make_dummy(wb, opts);
  bind_embed_and_head(wb, c, *m);
  const bool vp = m->vocab_parallel();
  const int vl = vp ? c.vocab_size / opts.shard->size : c.vocab_size;
  // Vocab-parallel embedding and LM head (Megatron's VocabParallelEmbedding,
  // vLLM's vocab_parallel_embedding.py): each rank holds rows
  // [rank * vl, + vl) of both, so it reads and uploads 1/P of them.
  if (vp) m->lm_head = slice_rows(m->lm_head, int64_t(vl) * opts.shard->rank, vl);
  if (vp) m->embed = slice_rows(m->embed, int64_t(vl) * opts.shard->rank, vl);
  m->layers.resize(c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) bind_decoder_layer(wb, c, l, m->layers[l]);
  m->mtp.resize(c.num_nextn_predict_layers);
  for (int i = 0; i < c.num_nextn_predict_layers; ++i) {
    const int index = c.num_hidden_layers + i;
    bind_mtp_head(wb, fmt::format("model.layers.{}", index), c, *m, m->mtp[i]);
    Tensor& head = m->mtp[i].head;
    if (vp && !head.empty() && head.shape[0] == c.vocab_size)  // its own head, not the shared one
      head = slice_rows(head, int64_t(vl) * opts.shard->rank, vl);
    Tensor& emb = m->mtp[i].embed;
    if (vp && !emb.empty() && emb.shape[0] == c.vocab_size)  // likewise its own embedding
      emb = slice_rows(emb, int64_t(vl) * opts.shard->rank, vl);
    bind_decoder_layer(wb, c, index, m->mtp[i].block);
  }
  m->finish(wb, opts);
  return m;
}

void DecoderModel::use_backend(const std::string& spec) {
  backend_ = make_backend(spec, &pool());
}

void DecoderModel::make_dummy(WeightBinder& wb, const LoadOptions& opts) {
  MX_CHECK(store_->size() == 0, "--load-format dummy: the tensor store must start empty");
  dummy_ = std::make_shared<DummyWeights>(*backend_, opts.dummy_seed);
  store_->keep_alive(dummy_);  // the store's tensors view its host memory
  wb.make_missing(*store_, *dummy_, opts.dummy_dtype == "f32" ? DType::F32 : DType::BF16);
}

const LoadStats* DecoderModel::load_stats() const { return dw_ ? &dw_->stats() : nullptr; }

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
  dw_ = std::make_unique<DeviceWeights>(*backend_, dummy_.get(), store_.get());
  place(*dw_);
  gpu_graphs_ = opts.gpu_graphs;
  arena_ = std::make_unique<DevArena>(*backend_);
  arena_->reserve(arena_bytes(opts.max_batch_tokens, 1, 64));
  if (plan_ && plan_->device_comm) dcomm_ = open_device_group(*backend_, *plan_->comm);
}

void DecoderModel::place(DeviceWeights& dw) {
  d_embed_ = dw.matrix(embed);
  d_lm_head_ = dw.matrix(lm_head);
  d_final_norm_ = dw.vector(final_norm);
  auto place_layer = [&](DecoderLayer& L) {
    L.d_attn_norm = dw.vector(L.attn_norm);
    L.d_mlp_norm = dw.vector(L.mlp_norm);
    L.attn->place(dw);
    L.ffn->place(dw);
  };
  for (auto& L : layers) place_layer(L);
  for (auto& m : mtp) {
    m.d_enorm = dw.vector(m.enorm), m.d_hnorm = dw.vector(m.hnorm), m.d_head_norm = dw.vector(m.head_norm);
    m.d_eh_proj = dw.matrix(m.eh_proj), m.d_embed = dw.matrix(m.embed), m.d_head = dw.matrix(m.head);
    place_layer(m.block);
  }
}

size_t DecoderModel::bytes_per_token() const {
  size_t n = size_t(cfg_.hidden_size) * dtype_bits(embed.dtype) / 8 + final_norm.nbytes() + lm_head.storage_bytes();
  for (const auto& L : layers)
    n += L.attn_norm.nbytes() + L.mlp_norm.nbytes() + L.attn->bytes_per_token() + L.ffn->bytes_per_token();
  return n;
}

size_t DecoderModel::arena_bytes(int T, int R, size_t table_ints) const {
  size_t layer = 0;
  auto account = [&](const DecoderLayer& L) {
    layer = std::max({layer, L.attn->scratch_bytes(T), L.ffn->scratch_bytes(T)});
  };
  for (const auto& L : layers) account(L);
  for (const auto& m : mtp) account(m.block);
  const size_t D = cfg_.hidden_size, V = cfg_.vocab_size;
  // Metadata (ids, pos, seq, slots, rows, tables); x, xn, tmp, hidden and the
  // MTP's embed / hidden / concat; the logit rows and their logits.
  size_t base = (6 * size_t(T) + table_ints) * 4 + 9 * size_t(T) * D * 4 + size_t(R) * (D + V) * 4 + 24 * 256;
  if (vocab_parallel()) base += 2 * size_t(R) * V * 4 + 512;  // local + gathered logits
  return base + layer;
}

int DecoderModel::check_batch(const Batch& batch, KVPool& kv, bool mtp) const {  const int T = int(batch.tokens.size());
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
  MX_CHECK(kv.backend() == backend_.get() || (!kv.backend() && backend_->host_memory()),
           "forward: the KV pool is not in the memory of the model's backend {} (create it with Model::backend())",
           backend_->name());
  check_batch(batch, kv, mtp);
  const int T = int(batch.tokens.size()), S = int(batch.seqs.size()), R = int(batch.logit_rows.size());
  int max_blocks = 1;
  for (const auto& s : batch.seqs) max_blocks = std::max(max_blocks, int(s.kv->blocks.size()));
  // A uniform batch (every sequence the same few new tokens, each with its
  // logits: decode steps, draft steps and speculative verification) may run as
  // a graph; its block tables then have a power-of-two stride (one graph per bucket).
  graph_batch_ = gpu_graphs_ && R == T && T <= kMaxGraphTokens && T % S == 0 && T / S <= kMaxGraphTokensPerSeq;
  for (const auto& s : batch.seqs) graph_batch_ = graph_batch_ && s.n_tokens == T / S;
  graph_seqs_ = S;
  if (graph_batch_) max_blocks = int(std::bit_ceil(unsigned(std::max(max_blocks, 8))));
  table_stride_ = max_blocks;
  // Host image of [ids | pos | seq | slots | rows | tables | local ids], uploaded in one copy.
  const bool vp = vocab_parallel();
  h_meta_.assign(size_t(4) * T + R + size_t(S) * max_blocks + (vp ? T : 0), 0);
  int32_t* ids = h_meta_.data();
  int32_t* pos = ids + T;
  int32_t* seq = pos + T;
  int32_t* slots = seq + T;
  int32_t* rows = slots + T;
  int32_t* tables = rows + R;
  std::copy(batch.tokens.begin(), batch.tokens.end(), ids);
  std::copy(batch.logit_rows.begin(), batch.logit_rows.end(), rows);
  if (vp) {  // this rank's rows of the vocab-parallel embedding; -1: another rank's token (a zero row)
    const int vl = cfg_.vocab_size / plan_->size, v0 = vl * plan_->rank;
    int32_t* local = tables + size_t(S) * max_blocks;
    for (int t = 0; t < T; ++t) local[t] = ids[t] >= v0 && ids[t] < v0 + vl ? ids[t] - v0 : -1;
  }
  const int bs = kv.block_size();
  for (int s = 0, t = 0; s < S; ++s) {
    const BatchSeq& q = batch.seqs[s];
    std::copy(q.kv->blocks.begin(), q.kv->blocks.end(), tables + size_t(s) * max_blocks);
    for (int i = 0; i < q.n_tokens; ++i, ++t) {
      pos[t] = q.start_pos + i;
      seq[t] = s;
      slots[t] = q.kv->blocks[pos[t] / bs] * bs + pos[t] % bs;
    }
  }
  DevArena& a = *arena_;
  a.reset();
  a.reserve(arena_bytes(T, R, size_t(S) * max_blocks));
  int32_t* d = a.alloc<int32_t>(h_meta_.size());
  backend_->upload(d, h_meta_.data(), h_meta_.size() * 4);
  d_ids_ = d;
  d_rows_ = d + 4 * T;
  d_local_ids_ = vp ? d + 4 * T + R + size_t(S) * max_blocks : nullptr;
  return ForwardCtx{*backend_, a, kv, T, d + T, d + 2 * T, d + 3 * T, d + 4 * T + R, max_blocks};
}

void DecoderModel::partial_allreduce(float* v, size_t n) {
  if (backend_->host_memory()) return plan_->comm->allreduce_sum(v, n);
  if (dcomm_) {  // NCCL / RCCL on the device, on the backend's stream
    plan_->comm->record(CommOp::AllReduce, plan_->comm->allreduce_bytes(n));
    return dcomm_->allreduce_sum(v, n);
  }
  // Host-staged (issue 23's fallback for GPU ranks: works on any backend,
  // HIP-CPU included), on the backend's comm stream: the host waits for the
  // download alone, and the compute stream's next op for the upload (events,
  // backends/backend.h comm_begin).
  stage_.resize(n);
  backend_->comm_begin();
  backend_->comm_download(stage_.data(), v, n * 4);
  plan_->comm->allreduce_sum(stage_.data(), n);
  backend_->comm_upload(v, stage_.data(), n * 4);
  backend_->comm_end();
}

void DecoderModel::embed_tokens(float* x, const DevWeight& table, int T) {
  if (table.out == cfg_.vocab_size) return backend_->embed(x, table, d_ids_, T);
  // Vocab-parallel: each rank writes its tokens' rows and zeros for the rest;
  // the sum over the ranks is the embedding (one allreduce of [T, D]).
  MX_CHECK(d_local_ids_, "vocab-parallel embedding without this rank's token ids");
  backend_->embed(x, table, d_local_ids_, T);
  partial_allreduce(x, size_t(T) * cfg_.hidden_size);
}

void DecoderModel::run_layer(ForwardCtx& ctx, const DecoderLayer& L, int kv_layer, float* x, float* xn,
                             float* tmp) {
  Backend& b = *backend_;
  const int T = ctx.n_tokens, D = cfg_.hidden_size;
  const size_t mark = arena_->mark();
  b.rmsnorm(xn, x, L.d_attn_norm, T, D, cfg_.rms_norm_eps);
  L.attn->forward(ctx, kv_layer, xn, tmp);
  if (L.attn_partial) partial_allreduce(tmp, size_t(T) * D);
  b.add(x, tmp, int64_t(T) * D);
  arena_->rewind(mark);
  b.rmsnorm(xn, x, L.d_mlp_norm, T, D, cfg_.rms_norm_eps);
  L.ffn->forward(ctx, xn, tmp);
  if (L.ffn_partial) partial_allreduce(tmp, size_t(T) * D);
  b.add(x, tmp, int64_t(T) * D);
  arena_->rewind(mark);
}

float* DecoderModel::project_rows(ForwardCtx& ctx, const float* x, int R, const float* norm, const DevWeight& head) {
  if (R == 0) return nullptr;
  Backend& b = *backend_;
  const int D = cfg_.hidden_size;
  float* xr = ctx.arena.alloc(size_t(R) * D);
  DevWeight rows_of_x;  // x as an f32 table, gathered by the logit rows
  rows_of_x.out = ctx.n_tokens, rows_of_x.in = D, rows_of_x.data = const_cast<float*>(x);
  b.embed(xr, rows_of_x, d_rows_, R);
  if (norm) b.rmsnorm(xr, xr, norm, R, D, cfg_.rms_norm_eps);
  float* out = ctx.arena.alloc(size_t(R) * head.out);
  b.matmul(out, xr, head, R);
  return out;
}

void DecoderModel::fetch_logits(const float* out, int R, int64_t Vl, float* logits) {
  if (R == 0) return;
  const int64_t V = cfg_.vocab_size;
  if (Vl == V) {
    backend_->download(logits, out, size_t(R) * V * 4);
    return;
  }
  // Vocab-parallel: each rank computes its vocab rows (every logit is one whole
  // dot product, so nothing is reduced), then all ranks gather [P][R][Vl]
  // (host-staged from a device backend).
  const int P = plan_->size;
  h_logits_.resize(size_t(P) * R * Vl);
  const size_t slice = size_t(R) * Vl * 4;
  if (dcomm_) {  // gathered on the devices, then one download
    if (gather_.bytes() < P * slice) gather_ = DevBuffer(*backend_, P * slice);
    plan_->comm->record(CommOp::AllGather, uint64_t(slice) * (P - 1));
    dcomm_->allgather(out, slice, gather_.get());
    backend_->download(h_logits_.data(), gather_.get(), P * slice);
  } else {
    if (!backend_->host_memory()) {  // on the comm stream, as partial_allreduce
      stage_.resize(size_t(R) * Vl);
      backend_->comm_begin();
      backend_->comm_download(stage_.data(), out, slice);
      backend_->comm_end();
      out = stage_.data();
    }
    plan_->comm->allgather(out, slice, h_logits_.data());
  }
  for (int p = 0; p < P; ++p)
    for (int r = 0; r < R; ++r)
      std::memcpy(logits + size_t(r) * V + size_t(p) * Vl, h_logits_.data() + (size_t(p) * R + r) * Vl, Vl * 4);
}

float* DecoderModel::run_steps(const ForwardCtx& ctx, int mtp_index, bool hidden,
                               const std::function<float*()>& body) {
  if (!graph_batch_) return body();
  if (arena_->base() != graph_arena_) {  // the arena moved: every graph points into the old one
    backend_->drop_graphs();
    graphs_.clear();
    graph_arena_ = arena_->base();
  }
  const PagedKV l0 = ctx.kv.layer(0);
  const GraphKey key{l0.k, l0.v, int(l0.dtype), ctx.n_tokens, graph_seqs_, table_stride_, mtp_index, hidden};
  if (auto it = graphs_.find(key); it != graphs_.end()) {
    backend_->replay_graph(it->second.id);
    arena_->rewind(it->second.arena_end);  // as if the body had run
    return it->second.out;
  }
  const size_t start = arena_->mark();
  float* out = body();  // the warm-up: it runs, and sizes every workspace the capture will use
  const size_t end = arena_->mark();
  arena_->rewind(start);
  Graph g;
  g.arena_end = end;
  try {
    g.id = backend_->capture_graph([&] { g.out = body(); });
    MX_CHECK(!g.id || (g.out == out && arena_->mark() == end), "the step's arena layout changed");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mxserve: graph capture of a %d-token step failed (%s): graphs off\n",
                 ctx.n_tokens, e.what());
    g.id = 0;
  }
  arena_->rewind(end);
  if (g.id) graphs_[key] = g;
  else gpu_graphs_ = false;  // a backend without graphs, or one whose capture failed: run eagerly from now on
  return out;
}

void DecoderModel::forward(const Batch& batch, KVPool& kv, float* logits, float* hidden) {
  ForwardCtx ctx = begin(batch, kv);
  Backend& b = *backend_;
  const int T = ctx.n_tokens, D = cfg_.hidden_size, R = int(batch.logit_rows.size());
  float* x = arena_->alloc(size_t(T) * D);
  float* xn = arena_->alloc(size_t(T) * D);
  float* tmp = arena_->alloc(size_t(T) * D);
  float* out = run_steps(ctx, -1, hidden != nullptr, [&] {
    embed_tokens(x, d_embed_, T);
    for (int l = 0; l < cfg_.num_hidden_layers; ++l) run_layer(ctx, layers[l], l, x, xn, tmp);
    if (!hidden) return project_rows(ctx, x, R, d_final_norm_, d_lm_head_);
    b.rmsnorm(xn, x, d_final_norm_, T, D, cfg_.rms_norm_eps);
    return project_rows(ctx, xn, R, nullptr, d_lm_head_);
  });
  fetch_logits(out, R, d_lm_head_.out, logits);
  if (hidden) b.download(hidden, xn, size_t(T) * D * 4);
  for (const auto& s : batch.seqs) s.kv->n_tokens = std::max(s.kv->n_tokens, s.start_pos + s.n_tokens);
}

void DecoderModel::forward_mtp(int i, const Batch& batch, KVPool& kv, const float* prev_hidden,
                               float* logits, float* hidden_out) {
  MX_CHECK(i >= 0 && i < int(mtp.size()), "MTP layer {} does not exist ({} layers)", i, mtp.size());
  const MtpLayer& m = mtp[i];
  ForwardCtx ctx = begin(batch, kv, /*mtp=*/true);
  Backend& b = *backend_;
  const int T = ctx.n_tokens, D = cfg_.hidden_size, R = int(batch.logit_rows.size());
  const float eps = cfg_.rms_norm_eps;
  float* e = arena_->alloc(size_t(T) * D);
  float* h = arena_->alloc(size_t(T) * D);
  float* cat = arena_->alloc(size_t(T) * 2 * D);
  float* x = arena_->alloc(size_t(T) * D);
  float* xn = arena_->alloc(size_t(T) * D);
  float* tmp = arena_->alloc(size_t(T) * D);
  b.upload(h, prev_hidden, size_t(T) * D * 4);
  float* out = run_steps(ctx, i, hidden_out != nullptr, [&] {
    embed_tokens(e, m.d_embed, T);
    b.rmsnorm(e, e, m.d_enorm, T, D, eps);
    b.rmsnorm(h, h, m.d_hnorm, T, D, eps);
    // Order [enorm(embed), hnorm(hidden)]: vLLM deepseek_mtp.py / sglang glm4_moe_nextn.py.
    b.copy_rows(cat, 2 * D, e, D, T, D);
    b.copy_rows(cat + D, 2 * D, h, D, T, D);
    b.matmul(x, cat, m.d_eh_proj, T);
    run_layer(ctx, m.block, cfg_.num_hidden_layers + i, x, xn, tmp);
    if (!hidden_out) return project_rows(ctx, x, R, m.d_head_norm, m.d_head);
    // The chained draft step consumes the state after shared_head.norm, as the
    // first step consumes the target's after model.norm (sglang deepseek_nextn.py
    // returns the normed state to its EAGLE worker).
    b.rmsnorm(xn, x, m.d_head_norm, T, D, eps);
    return project_rows(ctx, xn, R, nullptr, m.d_head);
  });
  fetch_logits(out, R, m.d_head.out, logits);
  if (hidden_out) b.download(hidden_out, xn, size_t(T) * D * 4);
}

}  // namespace mx
