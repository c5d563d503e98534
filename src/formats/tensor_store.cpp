#include "formats/tensor_store.h"

#include "core/error.h"

namespace mx {

void TensorStore::add(const std::string& name, const Tensor& t, const std::string& origin) {
  auto [it, inserted] = entries_.emplace(name, Entry{t, origin});
  if (!inserted) fail("tensor '{}' appears twice (in {} and {})", name, it->second.origin, origin);
}

void TensorStore::replace(const std::string& name, const Tensor& t, const std::string& origin) {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail("tensor '{}' (from {}) replaces nothing: the checkpoint has no such tensor", name, origin);
  it->second = Entry{t, origin};
}

void TensorStore::add_owned(const std::string& name, OwnedTensor t, const std::string& origin) {
  auto holder = std::make_shared<OwnedTensor>(std::move(t));
  add(name, holder->t, origin);
  keep_alive(holder);
}

const Tensor* TensorStore::find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second.t;
}

const Tensor& TensorStore::get(const std::string& name) const {
  const Tensor* t = find(name);
  if (!t) fail("tensor '{}' not found", name);
  return *t;
}

const std::string& TensorStore::origin(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail("tensor '{}' not found", name);
  return it->second.origin;
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> v;
  v.reserve(entries_.size());
  for (const auto& [k, e] : entries_) v.push_back(k);
  return v;
}

size_t TensorStore::total_bytes() const {
  size_t n = 0;
  for (const auto& [k, e] : entries_) n += e.t.nbytes();
  return n;
}

}  // namespace mx
