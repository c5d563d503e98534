#pragma once
// A bound model's weights placed in its backend's memory (backends/backend.h),
// once, after binding succeeded. On a backend whose memory is host memory (the
// CPU backend) a weight is a view of the checkpoint's own bytes (mmapped, no
// copy); elsewhere (GPUs) it is uploaded. Vectors (norms, biases) become f32.
// A weight used twice (tied embeddings, an MTP head sharing the main one) is
// placed once.
//
// Sharded loading (issue 23): a tensor-parallel or expert-parallel rank hands
// in only its part of each weight (comm/shard.h: row slices as views,
// column slices as WeightSlice references, other ranks' experts not at all),
// and this class reads exactly those bytes from the mmapped checkpoint:
// contiguous ranges are uploaded straight from the mapping, a column slice
// row by row through a bounded staging buffer (kStageBytes), and a dummy
// placeholder is made on the device (models/dummy_weights.h), so neither the
// whole tensor nor the whole model is ever copied into host memory. The
// checkpoint pages a rank never touches are never faulted in. LoadStats counts
// what was read, per checkpoint tensor, so tests can check a rank's share.
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/tensor.h"
#include "backends/backend.h"
#include "formats/tensor_store.h"
#include "models/dummy_weights.h"
#include "comm/shard.h"

namespace mx {

// What one model's (one rank's) placement read and wrote.
struct LoadStats {
  // Checkpoint bytes this rank read (a view placed on a host-memory backend
  // counts: its kernels read it), in total and by checkpoint tensor name.
  // A dummy tensor's bytes made for this rank count as read from it.
  uint64_t read_bytes = 0;
  std::map<std::string, uint64_t> read_by_tensor;
  uint64_t uploaded_bytes = 0;  // copied from host memory into backend memory
  uint64_t filled_bytes = 0;    // dummy weights made in backend memory
  uint64_t host_copy_bytes = 0;  // host copies the loader made (column slices on the CPU, f32 vectors)
  uint64_t prepared_bytes = 0;   // placed from host data a block derived (MLA's absorbed W_UK, dequantized)
  uint64_t checkpoint_bytes = 0;  // every tensor of the checkpoint (what one unsharded rank would read)
  std::string describe() const;  // "read 12.3 of 45.6 MiB (27%), uploaded ..."
};

class DeviceWeights {
 public:
  // dummy: --load-format dummy's weights; its placeholders are made in place
  // (Backend::fill_uniform_block) instead of uploaded. store: the tensors the
  // model was bound from, for LoadStats' per-tensor accounting (optional).
  explicit DeviceWeights(Backend& b, const DummyWeights* dummy = nullptr, const TensorStore* store = nullptr);
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  Backend& backend() const { return b_; }
  // A 2-D weight [out, in] (or this rank's columns of one) in any format the
  // kernels take (empty: an empty DevWeight).
  DevWeight matrix(const WeightSlice& t);
  // A vector as f32 (null for an empty tensor).
  const float* vector(const Tensor& t);
  const float* floats(const std::vector<float>& v);
  // Matrices of one shape and dtype, one allocation in order on a device
  // backend (the GPU MoE kernels take them as a stack); empty entries (another
  // rank's experts) give empty DevWeights and are allowed on host memory only.
  std::vector<DevWeight> stack(const std::vector<WeightSlice>& ts);
  // A block read t on the host itself (MLA's absorption, a router bias): counted as read.
  void count_read(const Tensor& t);
  // matrix() of a weight a block derived on the host from ones it counted
  // (count_read), even where it views the checkpoint: LoadStats::prepared_bytes.
  DevWeight derived(const Tensor& t);
  // Bytes copied into backend memory (0 on the CPU: everything is a view).
  size_t uploaded_bytes() const { return stats_.uploaded_bytes; }
  const LoadStats& stats() const { return stats_; }

  // Column slices travel through a host buffer of at most this many bytes.
  static constexpr size_t kStageBytes = size_t(8) << 20;

 private:
  DevWeight describe(const Tensor& t) const;
  // `rows` rows of `len` bytes, row r at src + r * stride, to dst (dense):
  // uploaded, or made when src is a dummy placeholder. Counts the read.
  void put(void* dst, const void* src, size_t rows, size_t len, size_t stride);
  // A slice's data and scales to dst / dst_scales (backend memory).
  void put_slice(const WeightSlice& s, void* dst, void* dst_scales);
  void record(const void* src, size_t bytes);
  Backend& b_;
  const DummyWeights* dummy_ = nullptr;
  std::vector<DevBuffer> owned_;
  std::vector<std::vector<float>> host_vectors_;
  std::deque<OwnedTensor> host_slices_;  // host memory: column slices' contiguous copies
  std::deque<Buffer> host_scales_;
  std::vector<char> stage_;
  // (data, rows, first column, columns, dtype)
  std::map<std::tuple<const void*, int64_t, int64_t, int64_t, int>, DevWeight> placed_;
  std::map<const char*, std::pair<std::string, size_t>> tensors_;  // store tensors by start: (name, bytes)
  LoadStats stats_;
  bool deriving_ = false;  // inside derived(): reads are not the checkpoint's
};

}  // namespace mx
