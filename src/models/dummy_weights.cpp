#include "models/dummy_weights.h"

#include <sys/mman.h>

#include <cstring>

#include "core/error.h"

namespace mx {

namespace {
// FNV-1a: a stable per-name seed on every platform and build.
uint64_t name_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}
constexpr size_t kKeysPerRegion = size_t(1) << 20;  // one byte of reserved address space per key
}  // namespace

DummyWeights::DummyWeights(Backend& backend, uint64_t seed) : backend_(backend), seed_(seed) {}

DummyWeights::~DummyWeights() {
  for (auto& [p, n] : regions_) ::munmap(p, n);
}

const void* DummyWeights::reserve_key() {
  if (regions_.empty() || next_key_ == kKeysPerRegion) {
    void* p = ::mmap(nullptr, kKeysPerRegion, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    MX_CHECK(p != MAP_FAILED, "dummy weights: cannot reserve address space for placeholders");
    regions_.push_back({static_cast<char*>(p), kKeysPerRegion});
    next_key_ = 0;
  }
  return regions_.back().first + next_key_++;
}

void DummyWeights::add(TensorStore& store, const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                       float lo, float hi) {
  Tensor t(dtype, shape, nullptr);
  const size_t n = size_t(t.numel());
  const uint64_t seed = seed_ ^ name_hash(name);
  if (backend_.host_memory() || shape.size() == 1) {
    // Made now, in host memory: the backend's memory, or a vector the model reads on the host.
    store.add(name, make_on_host({dtype, n, lo, hi, seed}, shape), "dummy");
    return;
  }
  t.data = const_cast<void*>(reserve_key());
  specs_[t.data] = {dtype, n, lo, hi, seed};
  store.add(name, t, "dummy");
}

const DummyWeights::Spec* DummyWeights::find(const void* p) const {
  auto it = specs_.find(p);
  return it == specs_.end() ? nullptr : &it->second;
}

bool DummyWeights::placeholder(const void* p) const { return p && find(p); }

void DummyWeights::fill(Backend& b, void* dst, const void* p) const {
  const Spec* s = find(p);
  MX_CHECK(s, "dummy weights: not a placeholder");
  b.fill_uniform(dst, s->dtype, s->n, s->lo, s->hi, s->seed);
}

const Tensor& DummyWeights::make_on_host(const Spec& s, const std::vector<int64_t>& shape) {
  OwnedTensor o = OwnedTensor::make(s.dtype, shape);
  if (!backend_.host_memory() && !host_backend_) host_backend_ = make_backend("cpu");
  (backend_.host_memory() ? backend_ : *host_backend_).fill_uniform(o.t.data, s.dtype, s.n, s.lo, s.hi, s.seed);
  host_.push_back(std::move(o));
  return host_.back().t;
}

Tensor DummyWeights::on_host(const Tensor& t) {
  Tensor r = t;
  auto host = [&](const void* p) -> void* {
    const Spec* s = find(p);
    return s ? make_on_host(*s, {int64_t(s->n)}).data : const_cast<void*>(p);
  };
  r.data = host(t.data);
  r.scales = t.scales ? host(t.scales) : nullptr;
  return r;
}

}  // namespace mx
