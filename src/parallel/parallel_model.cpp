#include "parallel/parallel_model.h"

#include <cstdio>
#include <optional>
#include <cstring>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/thread_pool.h"
#include "models/device_weights.h"
#include "models/kv_cache.h"
#include "comm/comm_local.h"
#include "parallel/placement.h"
#include "comm/shard.h"

namespace mx {

namespace {
enum Op : int32_t { kStop = 0, kForward = 1, kForwardMtp = 2, kStats = 3, kResetStats = 4 };

// Fixed-size header broadcast before every command.
struct Header {
  int32_t op = kStop, n_ints = 0, mtp_index = 0, want_hidden = 0;
  int32_t pool_blocks = 0, block_size = 0, n_tokens = 0, n_logit_rows = 0;
  int32_t kv_dtype = 0;  // the leader pool's DType: every rank caches alike
  int64_t pool_id = 0;  // the leader's pool, so a follower knows when to start a new one
};

void broadcast_header(Comm& comm, Header& h) { comm.broadcast(&h, sizeof h, 0); }
}  // namespace

void ParallelOptions::validate() const {
  MX_CHECK(tp >= 1 && tp <= 256 && ep >= 1 && ep <= 256, "--tp and --ep must be in [1, 256] (got {}, {})", tp, ep);
  MX_CHECK((tp == 1 || tp == ranks()) && (ep == 1 || ep == ranks()),
           "--tp {} --ep {}: expert parallel runs over the tensor-parallel ranks, so each must be 1 or {}", tp, ep,
           ranks());
  MX_CHECK(backend == "auto" || backend == "local" || backend == "mpi" || backend == "nccl" || backend == "rccl",
           "--comm must be auto, local, mpi, nccl or rccl (got '{}')", backend);
  MX_CHECK(replica >= 0, "data-parallel replica index {} must be >= 0", replica);
}

struct ParallelModel::Local {
  std::vector<std::unique_ptr<Comm>> comms;
  std::vector<std::unique_ptr<ThreadPool>> pools;
  std::vector<std::shared_ptr<ShardPlan>> plans;
  std::vector<std::unique_ptr<Model>> followers;
  std::vector<std::thread> threads;
};

ParallelModel::ParallelModel(std::unique_ptr<Model> shard, Comm& comm) : shard_(std::move(shard)), comm_(comm) {}

std::vector<const LoadStats*> ParallelModel::rank_load_stats() const {
  std::vector<const LoadStats*> r{shard_->load_stats()};
  if (local)
    for (const auto& m : local->followers) r.push_back(m->load_stats());
  return r;
}

ParallelModel::~ParallelModel() {
  try {
    Header h;
    h.op = kStop;
    broadcast_header(comm_, h);
  } catch (...) {
  }
  if (local)
    for (auto& t : local->threads) t.join();
}

void ParallelModel::send_batch(int op, int mtp_index, const Batch& batch, const KVPool& kv,
                               const float* prev_hidden, bool want_hidden) {
  msg_.clear();
  msg_.insert(msg_.end(), batch.tokens.begin(), batch.tokens.end());
  msg_.push_back(int32_t(batch.seqs.size()));
  for (const BatchSeq& s : batch.seqs) {
    MX_CHECK(s.kv, "forward: sequence without KV");
    msg_.insert(msg_.end(), {s.n_tokens, s.start_pos, s.kv->n_tokens, int32_t(s.kv->blocks.size())});
    msg_.insert(msg_.end(), s.kv->blocks.begin(), s.kv->blocks.end());
  }
  msg_.insert(msg_.end(), batch.logit_rows.begin(), batch.logit_rows.end());
  Header h;
  h.op = op;
  h.n_ints = int32_t(msg_.size());
  h.mtp_index = mtp_index;
  h.want_hidden = want_hidden;
  h.pool_blocks = kv.n_blocks();
  h.block_size = kv.block_size();
  h.kv_dtype = int32_t(kv.dtype());
  h.n_tokens = int32_t(batch.tokens.size());
  h.n_logit_rows = int32_t(batch.logit_rows.size());
  h.pool_id = int64_t(reinterpret_cast<uintptr_t>(&kv));
  broadcast_header(comm_, h);
  comm_.broadcast(msg_.data(), msg_.size() * 4, 0);
  if (op == kForwardMtp)
    comm_.broadcast(const_cast<float*>(prev_hidden), size_t(h.n_tokens) * config().hidden_size * 4, 0);
}

void ParallelModel::forward(const Batch& batch, KVPool& kv, float* logits, float* hidden) {
  send_batch(kForward, 0, batch, kv, nullptr, hidden != nullptr);
  shard_->forward(batch, kv, logits, hidden);
}

void ParallelModel::forward_mtp(int i, const Batch& batch, KVPool& kv, const float* prev_hidden, float* logits,
                                float* hidden_out) {
  send_batch(kForwardMtp, i, batch, kv, prev_hidden, hidden_out != nullptr);
  shard_->forward_mtp(i, batch, kv, prev_hidden, logits, hidden_out);
}

std::vector<CommStats> ParallelModel::group_stats() {
  Header h;
  h.op = kStats;
  broadcast_header(comm_, h);
  CommStats mine = comm_.stats();  // before the gather below counts itself
  std::vector<CommStats> all(comm_.size());
  comm_.allgather(&mine, sizeof mine, all.data());
  comm_.stats() = mine;
  return all;
}

void ParallelModel::reset_stats() {
  Header h;
  h.op = kResetStats;
  broadcast_header(comm_, h);
  comm_.stats().reset();
}

void follow_leader(Model& shard, Comm& comm) {
  std::unique_ptr<KVPool> pool;
  int64_t pool_id = 0;
  std::vector<int32_t> msg;
  std::vector<SeqKV> kvs;
  std::vector<float> logits, hidden, prev;
  Batch b;
  const int D = shard.config().hidden_size, V = shard.config().vocab_size;
  for (;;) {
    Header h;
    broadcast_header(comm, h);
    if (h.op == kStop) return;
    if (h.op == kStats) {
      CommStats mine = comm.stats();
      std::vector<CommStats> all(comm.size());
      comm.allgather(&mine, sizeof mine, all.data());
      comm.stats() = mine;
      continue;
    }
    if (h.op == kResetStats) {
      comm.stats().reset();
      continue;
    }
    msg.resize(h.n_ints);
    comm.broadcast(msg.data(), msg.size() * 4, 0);
    if (h.op == kForwardMtp) {
      prev.resize(size_t(h.n_tokens) * D);
      comm.broadcast(prev.data(), prev.size() * 4, 0);
    }
    if (!pool || pool_id != h.pool_id || pool->n_blocks() != h.pool_blocks || pool->block_size() != h.block_size) {
      pool = std::make_unique<KVPool>(shard.kv_layout(), h.pool_blocks, h.block_size, shard.backend(),
                                      DType(h.kv_dtype));
      pool_id = h.pool_id;
    }
    // Rebuild the batch with this rank's SeqKVs over the leader's block ids.
    b.clear();
    const int32_t* p = msg.data();
    b.tokens.assign(p, p + h.n_tokens);
    p += h.n_tokens;
    const int n_seqs = *p++;
    kvs.resize(n_seqs);
    for (int s = 0; s < n_seqs; ++s) {
      const int n = p[0], start = p[1], cached = p[2], nb = p[3];
      p += 4;
      kvs[s].blocks.assign(p, p + nb);
      kvs[s].n_tokens = cached;
      p += nb;
      b.seqs.push_back({n, start, &kvs[s]});
    }
    b.logit_rows.assign(p, p + h.n_logit_rows);
    logits.resize(std::max<size_t>(1, size_t(h.n_logit_rows) * V));
    hidden.resize(h.want_hidden ? size_t(h.n_tokens) * D : 0);
    try {
      if (h.op == kForward)
        shard.forward(b, *pool, logits.data(), h.want_hidden ? hidden.data() : nullptr);
      else
        shard.forward_mtp(h.mtp_index, b, *pool, prev.data(), logits.data(), h.want_hidden ? hidden.data() : nullptr);
    } catch (const std::exception& e) {
      // The leader validates the same batch the same way and reports the error;
      // say it here too, in case this rank alone failed (its peers then wait).
      std::fprintf(stderr, "mxserve: rank %d: forward failed: %s\n", comm.rank(), e.what());
    }
  }
}

std::unique_ptr<Model> load_parallel_model(const std::string& path, const ParallelOptions& po, LoadOptions opts) {
  po.validate();
  const int n = po.ranks();
  // Rank r of replica po.replica on its own device (first + replica * n + r).
  const std::string kind = po.device.substr(0, po.device.find(':'));
  const int n_devices = kind == "cuda" || kind == "hip" ? backend_device_count(kind) : 0;
  auto device_of = [&](int r) { return device_for_rank(po.device, po.replica, n, r, n_devices); };
  opts.backend = device_of(0);
  const bool device_comm = po.backend == "nccl" || po.backend == "rccl";
  const bool use_mpi = po.backend == "mpi" || ((po.backend == "auto" || device_comm) && launched_by_mpi());
  auto report = [&](const Model& m, int rank) {
    if (po.load_stats) std::fprintf(stderr, "%s\n", describe_load(m, rank, n).c_str());
  };
  if (n == 1 && !use_mpi && !device_comm) {
    // One CPU rank reads every weight where it is mapped (prefaulted in one
    // pass); a device backend reads each page once, to upload it.
    std::optional<MappedFile::Lazy> lazy;
    if (opts.backend != "cpu") lazy.emplace();
    auto m = load_model(path, opts);
    report(*m, 0);
    return m;
  }
  MX_CHECK(!device_comm || use_mpi || n == 1,
           "--comm {} runs one process per GPU: start the {} ranks with mpirun -np {} (in-process ranks: --comm "
           "local, host-staged)",
           po.backend, n, n);
  // Each rank maps the checkpoint (address space only) and reads just its
  // share when it places its weights (models/device_weights.h); with
  // --load-format dummy each rank makes its share into a store of its own.
  Checkpoint ck = [&] {
    MappedFile::Lazy lazy;  // no rank reads the whole file: do not prefault it
    return open_checkpoint(path, opts);
  }();
  const bool dummy = opts.load_format == "dummy";
  if (device_comm && !use_mpi) {
    // One rank, no mpirun: a one-rank group whose device communicator still
    // opens and self-checks (the NCCL path of `--tp 1 --comm nccl`).
    auto local = std::make_unique<ParallelModel::Local>();
    local->comms.push_back(make_self_comm());
    auto plan = std::make_shared<ShardPlan>();
    *plan = ShardPlan{local->comms[0].get(), 0, 1, false, false, nullptr};
    plan->device_comm = true;
    local->plans.push_back(plan);
    opts.shard = plan;
    auto pm = std::make_unique<ParallelModel>(build_model(ck, opts), *local->comms[0]);
    pm->local = std::move(local);
    report(*pm, 0);
    return pm;
  }
  if (use_mpi) {
    Comm& comm = mpi_world();
    MX_CHECK(comm.size() == n, "mpirun started {} ranks, but --tp {} --ep {} needs {}", comm.size(), po.tp, po.ep, n);
    auto plan = std::make_shared<ShardPlan>();
    *plan = ShardPlan{&comm, comm.rank(), n, po.tp > 1, po.ep > 1, nullptr};
    plan->device_comm = device_comm;
    opts.shard = plan;
    opts.backend = device_of(comm.rank());
    std::unique_ptr<Model> m = build_model(ck, opts);
    report(*m, comm.rank());
    // The checkpoint pages this rank read are in its backend memory now (or,
    // on the CPU, faulted back in as its kernels read them): drop them.
    MappedFile::release_all_resident();
    if (comm.rank() != 0) {
      follow_leader(*m, comm);
      return nullptr;
    }
    return std::make_unique<ParallelModel>(std::move(m), comm);
  }
  // In-process ranks: one thread and one compute pool per rank.
  auto local = std::make_unique<ParallelModel::Local>();
  local->comms = make_local_comms(n);
  const int threads = std::max(1, global_pool().size() / n);
  std::vector<std::unique_ptr<Model>> models;
  for (int r = 0; r < n; ++r) {
    local->pools.push_back(std::make_unique<ThreadPool>(threads));
    auto plan = std::make_shared<ShardPlan>();
    *plan = ShardPlan{local->comms[r].get(), r, n, po.tp > 1, po.ep > 1, local->pools[r].get()};
    local->plans.push_back(plan);
    opts.shard = plan;
    opts.backend = device_of(r);
    models.push_back(build_model(r && dummy ? open_checkpoint(path, opts) : ck, opts));
    report(*models.back(), r);
  }
  for (int r = 1; r < n; ++r) {
    local->followers.push_back(std::move(models[r]));
    Model* m = local->followers.back().get();
    Comm* c = local->comms[r].get();
    local->threads.emplace_back([m, c] { follow_leader(*m, *c); });
  }
  auto pm = std::make_unique<ParallelModel>(std::move(models[0]), *local->comms[0]);
  pm->local = std::move(local);
  return pm;
}

namespace {
size_t status_kb(const char* format) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, format, &kb) == 1) break;
  std::fclose(f);
  return kb;
}
}  // namespace

size_t resident_bytes() { return status_kb("VmRSS: %zu kB") * 1024; }
size_t peak_resident_bytes() { return status_kb("VmHWM: %zu kB") * 1024; }

std::string describe_load(const Model& m, int rank, int ranks) {
  const LoadStats* s = m.load_stats();
  const Backend* b = m.backend();
  return fmt::format("load: rank {}/{} ({}): {}; peak RSS {:.0f} MiB", rank, ranks, b ? b->name() : "cpu",
                     s ? s->describe() : "not counted", peak_resident_bytes() / 1048576.0);
}

std::string describe_comm(const std::vector<CommStats>& stats, uint64_t tokens) {
  std::string s;
  const double t = tokens ? double(tokens) : 1.0;
  for (size_t op = 0; op < size_t(CommOp::kCount); ++op) {
    uint64_t b = 0, calls = 0;
    for (const CommStats& st : stats) b += st.bytes[op], calls = std::max(calls, st.calls[op]);
    if (!calls) continue;
    s += fmt::format("{}{}: {:.0f} B/token ({} calls)", s.empty() ? "" : ", ", comm_op_name(CommOp(op)), b / t, calls);
  }
  uint64_t total = 0;
  for (const CommStats& st : stats) total += st.total_bytes();
  return fmt::format("{:.0f} bytes/token sent over all ranks [{}]", total / t, s.empty() ? "none" : s);
}

}  // namespace mx
