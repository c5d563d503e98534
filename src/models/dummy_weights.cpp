#include "models/dummy_weights.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "core/address_map.h"
#include "core/error.h"

namespace mx {

namespace {
// FNV-1a: a stable per-name seed on every platform and build.
uint64_t name_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}
// Placeholders are carved out of large PROT_NONE reservations (address space
// only, MAP_NORESERVE): one mapping per tensor would exceed vm.max_map_count
// for a DeepSeek-V3-sized model (~10^5 expert tensors).
constexpr size_t kRegionBytes = size_t(64) << 30;
}  // namespace

DummyWeights::DummyWeights(Backend& backend, uint64_t seed) : backend_(backend), seed_(seed) {}

DummyWeights::~DummyWeights() {
  for (auto& [p, n] : regions_) ::munmap(p, n);
}

const void* DummyWeights::reserve(size_t bytes) {
  bytes = std::max<size_t>((bytes + 63) & ~size_t(63), 64);  // distinct, aligned starts
  if (regions_.empty() || used_ + bytes > regions_.back().second) {
    const size_t n = std::max(kRegionBytes, bytes);
    void* p = ::mmap(nullptr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    MX_CHECK(p != MAP_FAILED, "dummy weights: cannot reserve {} bytes of address space for placeholders", n);
    regions_.push_back({static_cast<char*>(p), n});
    used_ = 0;
  }
  const char* p = regions_.back().first + used_;
  used_ += bytes;
  return p;
}

void DummyWeights::add(TensorStore& store, const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                       float lo, float hi) {
  Tensor t(dtype, shape, nullptr);
  const size_t n = size_t(t.numel()), elem = dtype_bits(dtype) / 8;
  MX_CHECK(elem > 0, "dummy weights: {} has no whole-byte elements", dtype_name(dtype));
  const Spec spec{dtype, n, elem, lo, hi, seed_ ^ name_hash(name)};
  if (backend_.host_memory() || shape.size() == 1) {
    // Made now, in host memory: the backend's memory, or a vector the model reads on the host.
    store.add(name, make_on_host(spec, 0, shape), "dummy");
    return;
  }
  t.data = const_cast<void*>(reserve(n * elem));
  specs_[static_cast<const char*>(t.data)] = spec;
  store.add(name, t, "dummy");
}

const DummyWeights::Spec* DummyWeights::find(const void* p, size_t* offset) const {
  const auto it = range_holding(specs_, p, [](const Spec& s) { return s.n * s.elem; });
  if (it == specs_.end()) return nullptr;
  if (offset) *offset = size_t(static_cast<const char*>(p) - it->first);
  return &it->second;
}

bool DummyWeights::placeholder(const void* p) const { return find(p) != nullptr; }

void DummyWeights::fill(Backend& b, void* dst, const void* p, size_t rows, size_t row_bytes, size_t stride) const {
  size_t off = 0;
  const Spec* s = find(p, &off);
  MX_CHECK(s, "dummy weights: not a placeholder");
  const size_t e = s->elem;
  MX_CHECK(off % e == 0 && row_bytes % e == 0 && stride % e == 0 &&
               off + (rows ? (rows - 1) * stride + row_bytes : 0) <= s->n * e,
           "dummy weights: bytes [{}, rows {} x {} stride {}) are not whole elements inside a {}-byte tensor", off,
           rows, row_bytes, stride, s->n * e);
  b.fill_uniform_block(dst, s->dtype, rows, row_bytes / e, stride / e, off / e, s->lo, s->hi, s->seed);
}

const Tensor& DummyWeights::make_on_host(const Spec& s, size_t first, const std::vector<int64_t>& shape) {
  OwnedTensor o = OwnedTensor::make(s.dtype, shape);
  if (!backend_.host_memory() && !host_backend_) host_backend_ = make_backend("cpu");
  const size_t n = size_t(o.t.numel());
  (backend_.host_memory() ? backend_ : *host_backend_)
      .fill_uniform_block(o.t.data, s.dtype, 1, n, n, first, s.lo, s.hi, s.seed);
  host_.push_back(std::move(o));
  return host_.back().t;
}

Tensor DummyWeights::on_host(const Tensor& t) {
  Tensor r = t;
  // p's `bytes` bytes on the host: the placeholder's elements made now, else p itself.
  auto host = [&](const void* p, size_t bytes) -> void* {
    size_t off = 0;
    const Spec* s = find(p, &off);
    if (!s) return const_cast<void*>(p);
    MX_CHECK(off % s->elem == 0 && bytes % s->elem == 0 && off + bytes <= s->n * s->elem,
             "dummy weights: a host copy of bytes [{}, +{}) of a {}-byte tensor", off, bytes, s->n * s->elem);
    return make_on_host(*s, off / s->elem, {int64_t(bytes / s->elem)}).data;
  };
  const size_t data_bytes = t.nbytes();
  r.data = host(t.data, data_bytes);
  r.scales = t.scales ? host(t.scales, t.storage_bytes() - data_bytes) : nullptr;
  return r;
}

}  // namespace mx
