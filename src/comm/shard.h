#pragma once
// How one rank's copy of the model is cut: tensor parallel (attention heads and
// their KV, dense MLP and expert hidden dims split column/row-wise, vocab-
// parallel LM head) and/or expert parallel (whole experts per rank, tokens
// dispatched with all-to-all). Sharding happens at bind time: a rank keeps
// views of its rows (zero copy) and copies of its column slices, and binds
// only its heads' KV, so weights and KV per rank really drop.
#include <memory>
#include <string>

#include "core/tensor.h"

namespace mx {

class Comm;
class ThreadPool;

struct ShardPlan {
  Comm* comm = nullptr;        // the model-parallel group; null = unsharded
  int rank = 0, size = 1;
  bool tp = false;             // attention + dense MLP + LM head sharded over the group
  bool ep = false;             // MoE layers: experts sharded over the group (else TP-split)
  ThreadPool* pool = nullptr;  // compute pool of this rank (in-process ranks each have one)
  // --comm nccl: the model opens a device communicator (NCCL / RCCL,
  // backends/device_comm.h) over `comm` and runs its TP collectives on device
  // buffers; false: a device backend's collectives are host-staged through `comm`.
  bool device_comm = false;

  bool active() const { return comm && size > 1; }
  bool tp_on() const { return active() && tp; }
  bool ep_on() const { return active() && ep; }
  // [begin, begin + count) of n items that this rank holds, contiguous, n % size == 0.
  int part(int n, const char* what) const;  // count; checks divisibility
  int begin(int n) const { return int(int64_t(n) * rank / size); }
  std::string describe() const;
};

// Rows [r0, r0 + n) of a 2-D weight, as a view (block scales follow). FP8
// block scales need r0 and n multiples of 128 unless n is all rows.
Tensor slice_rows(const Tensor& w, int64_t r0, int64_t n);
// Columns [c0, c0 + n) of a 2-D weight, copied into `own` (MXFP4 needs
// multiples of 32, FP8 of 128). An empty input gives an empty result.
Tensor slice_cols(const Tensor& w, int64_t c0, int64_t n, OwnedTensor& own, Buffer& own_scales);
// Elements [i0, i0 + n) of a 1-D tensor (bias), as a view.
Tensor slice_vec(const Tensor& v, int64_t i0, int64_t n);

}  // namespace mx
