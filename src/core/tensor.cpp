#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"

namespace mx {

Tensor::Tensor(DType t, const std::vector<int64_t>& dims, void* p) : dtype(t), data(p) {
  MX_CHECK(dims.size() <= 4, "tensor rank {} > 4 is not supported", dims.size());
  ndim = int(dims.size());
  for (int i = 0; i < ndim; ++i) shape[i] = dims[i];
}
Tensor::Tensor(DType t, std::initializer_list<int64_t> dims, void* p)
    : Tensor(t, std::vector<int64_t>(dims), p) {}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

size_t Tensor::storage_bytes() const {
  size_t n = nbytes();
  if (!scales || ndim != 2) return n;
  if (dtype == DType::MXFP4) return n + size_t(shape[0]) * (shape[1] / 32);
  if (dtype == DType::F8_E4M3) return n + size_t((shape[0] + 127) / 128) * ((shape[1] + 127) / 128) * 4;
  return n;
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void Buffer::Free::operator()(void* p) const { std::free(p); }

Buffer::Buffer(size_t bytes) : size_(bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded ? rounded : 64);
  if (!p) throw std::bad_alloc();
  ptr_.reset(p);
}

OwnedTensor OwnedTensor::make(DType dt, const std::vector<int64_t>& dims) {
  OwnedTensor o;
  o.t = Tensor(dt, dims, nullptr);
  const size_t bytes = dtype_bytes(dt, o.t.numel());
  o.buf = Buffer(bytes);
  std::memset(o.buf.data(), 0, bytes);
  o.t.data = o.buf.data();
  return o;
}

}  // namespace mx
