#pragma once
// Tensor / expert parallel model: one rank's shard behind the Model interface.
// Rank 0 (the leader) runs the engine or the generate loop as with any model;
// its forward() first broadcasts the batch (tokens, positions, block tables,
// logit rows) to the other ranks, then computes its shard; the followers run
// follow_leader(), a loop that receives each batch and computes their shards
// into a KV pool of the same block count, so block ids mean the same on every
// rank and the engine needs no change. Logits and hidden states come out whole
// on rank 0 (vocab-parallel logits are gathered).
//
// Backends: under mpirun every process builds its own shard and ranks > 0 stay
// in follow_leader() until the leader is destroyed; without mpirun the ranks are
// threads of this process (in-process communicator), each with its own thread pool.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "models/model.h"
#include "comm/comm.h"

namespace mx {

struct ParallelOptions {
  int tp = 1;                  // tensor-parallel ranks (attention, dense MLP, LM head)
  int ep = 1;                  // expert-parallel ranks for the MoE layers (1: TP-split experts)
  // communicator: auto (mpi under mpirun, else local), local, mpi, or nccl (rccl:
  // the same): device collectives (backends/device_comm.h) over the MPI ranks, or
  // one rank without mpirun; the batch broadcasts stay on MPI.
  std::string backend = "auto";
  std::string device = "cpu";    // compute backend the model runs on (LoadOptions::backend)
  int replica = 0;               // data-parallel replica index: its ranks' devices (parallel/placement.h)
  bool load_stats = false;       // --load-stats: every rank prints what its loader read and placed (stderr)
  int ranks() const { return tp > ep ? tp : ep; }
  void validate() const;
};

class ParallelModel final : public Model {
 public:
  // Leader side: takes rank 0's shard and the group (owning nothing else).
  ParallelModel(std::unique_ptr<Model> shard, Comm& comm);
  ~ParallelModel() override;  // tells the followers to stop, joins in-process ranks

  const ModelConfig& config() const override { return shard_->config(); }
  Backend* backend() const override { return shard_->backend(); }  // rank 0's: the engine's KV pool lives there
  KVLayout kv_layout() const override { return shard_->kv_layout(); }
  void forward(const Batch& batch, KVPool& kv, float* logits, float* hidden = nullptr) override;
  int num_mtp_layers() const override { return shard_->num_mtp_layers(); }
  void forward_mtp(int i, const Batch& batch, KVPool& kv, const float* prev_hidden, float* logits,
                   float* hidden_out = nullptr) override;
  const std::vector<BoundParam>& weight_map() const override { return shard_->weight_map(); }
  int64_t parameter_count() const override { return shard_->parameter_count(); }
  size_t bytes_per_token() const override { return shard_->bytes_per_token(); }
  size_t weight_bytes() const override { return shard_->weight_bytes(); }
  const LoadStats* load_stats() const override { return shard_->load_stats(); }  // rank 0's

  Comm& comm() { return comm_; }
  // Each rank's LoadStats in rank order: every rank's with in-process ranks,
  // rank 0's alone under mpirun (the others print theirs with --load-stats).
  std::vector<const LoadStats*> rank_load_stats() const;
  // Every rank's communicator counters (collective over the group), rank order.
  std::vector<CommStats> group_stats();
  void reset_stats();

  // In-process ranks: what the leader keeps alive for its follower threads.
  struct Local;
  std::unique_ptr<Local> local;

 private:
  void send_batch(int op, int mtp_index, const Batch& batch, const KVPool& kv, const float* prev_hidden,
                  bool want_hidden);
  std::unique_ptr<Model> shard_;
  Comm& comm_;
  std::vector<int32_t> msg_;
};

// Follower ranks: serve the leader's forwards until it stops.
void follow_leader(Model& shard, Comm& comm);

// Loads a model for `po`: the plain model when po needs one rank; else rank 0's
// ParallelModel (in-process ranks started), or, on an MPI follower rank, runs
// follow_leader() and returns null (the caller then exits).
std::unique_ptr<Model> load_parallel_model(const std::string& path, const ParallelOptions& po,
                                           LoadOptions opts = {});

// This process's resident set (VmRSS) and its peak (VmHWM), 0 when unknown.
size_t resident_bytes();
size_t peak_resident_bytes();

// "rank 1/2 (hip): read 12.3 MiB of the checkpoint's 45.6 MiB (27%), ...; peak RSS 80 MiB"
// (--load-stats: what this rank's loader read, models/device_weights.h LoadStats).
std::string describe_load(const Model& m, int rank, int ranks);

// "allreduce 1.2 MB, all-to-all ..." per token over every rank's counters.
std::string describe_comm(const std::vector<CommStats>& stats, uint64_t tokens);

}  // namespace mx
