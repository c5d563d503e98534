#pragma once
// --load-format dummy (vLLM's name for it): a model from its config.json alone,
// with random weights made where they live, so a GLM-4.5-Air- or
// DeepSeek-V3-shaped stack can be served and benchmarked with no checkpoint.
//
// The weight binder (models/weight_binder.h) asks for every parameter by name,
// shape and dtype as for a real checkpoint; in dummy mode each one it does not
// find is made here and added to the (initially empty) TensorStore, in the
// layout a checkpoint of that format has (MXFP4: Quark's U8 packed weight +
// E8M0 weight_scale; FP8: F8_E4M3 weight + f32 weight_scale_inv), so the rest
// of the loader, its checks included, runs unchanged.
//
// Where the values are made: a vector (norms, biases) always on the host (the
// model reads them there); a matrix on a host-memory backend (the CPU) in host
// memory at once, and on a device backend only when DeviceWeights places it:
// until then its data and scales are placeholders (address space of the
// tensor's size reserved with no access, so a tensor-parallel rank's row slice
// of one, a pointer into it, still names the tensor and its offset), filled on
// the device by Backend::fill_uniform_block: a rank makes only its rows or
// columns, never the whole tensor (vLLM's dummy loader instead fills each
// rank's already-sliced parameter; the values here do not depend on the
// rank count because every element is drawn from its index). Values are
// uniform, drawn per element from (seed, name) by backends/fill_impl.h, so a
// dummy model is the same model on every backend: projections +-0.035 (std
// 0.02, HF's initializer_range), norms 0.9..1.1, MXFP4 codes uniform with E8M0
// scales 2^-8..2^-6, FP8 values +-1 with block scales 0.03..0.04.
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "formats/tensor_store.h"
#include "backends/backend.h"

namespace mx {

class DummyWeights {
 public:
  // The backend the model runs on; seed: --dummy-seed.
  DummyWeights(Backend& backend, uint64_t seed);
  ~DummyWeights();
  DummyWeights(const DummyWeights&) = delete;
  DummyWeights& operator=(const DummyWeights&) = delete;

  // A tensor `name` of this dtype and shape with values in [lo, hi) (U8:
  // integers in [lo, hi]), added to `store`.
  void add(TensorStore& store, const std::string& name, DType dtype, const std::vector<int64_t>& shape, float lo,
           float hi);
  // Whether p points into the placeholder of a tensor not made yet (device backends).
  bool placeholder(const void* p) const;
  // Makes `rows` rows of `row_bytes` bytes at dst (`backend` memory, dense),
  // row r being the placeholder's bytes [p + r * stride, + row_bytes): the
  // whole tensor (rows 1), a row slice (p inside it) or a column slice.
  // Offsets and lengths must be whole elements of the tensor's dtype.
  void fill(Backend& backend, void* dst, const void* p, size_t rows, size_t row_bytes, size_t stride) const;
  // t with its data and scales in host memory (made now when placeholders:
  // t's own elements only, a slice included), for the host-side preparation
  // some blocks do (MLA's absorption).
  Tensor on_host(const Tensor& t);
  size_t tensors() const { return specs_.size(); }

 private:
  struct Spec {
    DType dtype;
    size_t n;  // elements (bytes: n * elem)
    size_t elem;
    float lo, hi;
    uint64_t seed;
  };
  // The placeholder p points into and p's byte offset in it; null when none.
  const Spec* find(const void* p, size_t* offset = nullptr) const;
  // A host tensor of this shape holding s's elements [first, first + numel(shape)).
  const Tensor& make_on_host(const Spec& s, size_t first, const std::vector<int64_t>& shape);
  const void* reserve(size_t bytes);

  Backend& backend_;
  uint64_t seed_;
  std::map<const char*, Spec> specs_;  // by placeholder start
  std::deque<OwnedTensor> host_;  // stable addresses: the store views them
  std::unique_ptr<Backend> host_backend_;  // the CPU's, for host copies when backend_ is a device
  std::vector<std::pair<char*, size_t>> regions_;  // reserved, never accessible
  size_t used_ = 0;                                // bytes handed out of regions_.back()
};

}  // namespace mx
