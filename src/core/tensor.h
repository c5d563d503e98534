#pragma once
// A Tensor is a non-owning, contiguous, row-major view: dtype + shape + pointer.
// Weights are views into mmapped checkpoint files (zero copy); activations are
// views into an Arena or a Buffer. Up to 4 dims is all the models need.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace mx {

struct Tensor {
  DType dtype = DType::F32;
  int ndim = 0;
  std::array<int64_t, 4> shape{1, 1, 1, 1};
  void* data = nullptr;
  // Block scales of a quantized weight: for MXFP4 one E8M0 byte per 32 elements
  // of each row ([rows, cols/32]); for block-scaled F8_E4M3 one f32 per 128x128
  // block ([ceil(rows/128), ceil(cols/128)]). Null for plain tensors.
  const void* scales = nullptr;

  Tensor() = default;
  Tensor(DType t, std::initializer_list<int64_t> dims, void* p);
  Tensor(DType t, const std::vector<int64_t>& dims, void* p);

  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
  int64_t numel() const;
  size_t nbytes() const { return data ? dtype_bytes(dtype, numel()) : 0; }  // 0 for an empty view
  bool empty() const { return data == nullptr; }
  // Bytes a kernel streams to read the whole tensor: data plus block scales.
  size_t storage_bytes() const;
  std::vector<int64_t> dims() const { return {shape.begin(), shape.begin() + ndim}; }
  std::string shape_str() const;  // "[4096, 128]"

  template <typename T>
  T* as() const { return static_cast<T*>(data); }
  // Row r of a 2-D tensor (or the r-th slice along dim 0).
  void* row(int64_t r) const {
    return static_cast<char*>(data) + dtype_bytes(dtype, r * (numel() / shape[0]));
  }
};

// 64-byte aligned owning allocation; used where a view needs backing memory
// (converted weights, KV pools, arenas).
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes);
  void* data() const { return ptr_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free { void operator()(void* p) const; };
  std::unique_ptr<void, Free> ptr_;
  size_t size_ = 0;
};

// A tensor together with the memory it views.
struct OwnedTensor {
  Buffer buf;
  Tensor t;
  static OwnedTensor make(DType dt, const std::vector<int64_t>& dims);
};

}  // namespace mx
