#pragma once
// A bound model's weights placed in its backend's memory (backends/backend.h),
// once, after binding succeeded. On a backend whose memory is host memory (the
// CPU backend) a weight is a view of the checkpoint's own bytes (mmapped, no
// copy); elsewhere (GPUs) it is uploaded. Vectors (norms, biases) become f32.
// A weight used twice (tied embeddings, an MTP head sharing the main one) is
// placed once.
#include <map>
#include <tuple>
#include <vector>

#include "core/tensor.h"
#include "backends/backend.h"
#include "models/dummy_weights.h"

namespace mx {

class DeviceWeights {
 public:
  // dummy: --load-format dummy's weights; its placeholders are made in place
  // (Backend::fill_uniform) instead of uploaded.
  explicit DeviceWeights(Backend& b, const DummyWeights* dummy = nullptr) : b_(b), dummy_(dummy) {}
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  Backend& backend() const { return b_; }
  // A 2-D weight [out, in] in any format the kernels take (empty: an empty DevWeight).
  DevWeight matrix(const Tensor& t);
  // A vector as f32 (null for an empty tensor).
  const float* vector(const Tensor& t);
  const float* floats(const std::vector<float>& v);
  // Matrices of one shape and dtype, one allocation in order on a device
  // backend (the GPU MoE kernels take them as a stack); null entries (another
  // rank's experts) give empty DevWeights and are allowed on host memory only.
  std::vector<DevWeight> stack(const std::vector<const Tensor*>& ts);
  // Bytes copied into backend memory (0 on the CPU: everything is a view).
  size_t uploaded_bytes() const { return uploaded_; }

 private:
  DevWeight describe(const Tensor& t) const;
  void put(void* dst, const void* src, size_t bytes);  // upload, or make a dummy placeholder
  Backend& b_;
  const DummyWeights* dummy_ = nullptr;
  std::vector<DevBuffer> owned_;
  std::vector<std::vector<float>> host_vectors_;
  std::map<std::tuple<const void*, int64_t, int64_t, int>, DevWeight> placed_;  // (data, out, in, dtype)
  size_t uploaded_ = 0;
};

}  // namespace mx
