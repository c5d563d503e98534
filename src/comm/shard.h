#pragma once
// How one rank's copy of the model is cut: tensor parallel (attention heads and
// their KV, dense MLP and expert hidden dims split column/row-wise, vocab-
// parallel LM head) and/or expert parallel (whole experts per rank, tokens
// dispatched with all-to-all). Sharding happens at bind time: a rank keeps
// views of its rows (zero copy) and references to its column slices, and
// binds only its heads' KV, so weights and KV per rank really drop. Nothing is
// read at bind time: DeviceWeights (models/device_weights.h) reads a rank's
// rows, columns and experts when it places them, straight from the mmapped
// checkpoint into backend memory, as vLLM's and sglang's weight_loader narrow
// the checkpoint tensor to the rank's shard before the copy to the device
// (vllm/model_executor/layers/linear.py: ColumnParallelLinear /
// RowParallelLinear.weight_loader; sglang/srt/layers/linear.py).
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
// A 2-D weight as one rank holds it: columns [c0, c0 + cols) of `whole` (a
// checkpoint tensor or a row slice of one); all of them unless slice_cols cut
// it. Columns are strided in the checkpoint, so a column slice stays a
// reference until DeviceWeights places it, copying only those columns. A
// Tensor converts to its whole self.
struct WeightSlice {
  Tensor whole;
  int64_t c0 = 0, cols = 0;

  WeightSlice() = default;
  WeightSlice(const Tensor& t) : whole(t), cols(t.empty() || t.ndim < 2 ? 0 : t.shape[1]) {}  // NOLINT: implicit
  bool empty() const { return whole.empty(); }
  bool sliced() const { return !empty() && cols != whole.shape[1]; }
  int64_t rows() const { return whole.shape[0]; }
  // The slice as a tensor's shape and dtype (no data): what the model holds.
  Tensor shape() const;
  size_t storage_bytes() const { return empty() ? 0 : shape().storage_bytes(); }
};

// Columns [c0, c0 + n) of a 2-D weight, by reference; the bounds and the
// quantization blocks are checked now (MXFP4 needs multiples of 32, FP8 of
// 128). An empty input gives an empty result.
WeightSlice slice_cols(const Tensor& w, int64_t c0, int64_t n);
// The slice's bytes copied into `own` (plus its block scales into own_scales):
// its contiguous form in host memory (the CPU backend, whose memory that is).
Tensor copy_cols(const WeightSlice& s, OwnedTensor& own, Buffer& own_scales);
// Elements [i0, i0 + n) of a 1-D tensor (bias), as a view.
Tensor slice_vec(const Tensor& v, int64_t i0, int64_t n);

}  // namespace mx
