#pragma once
// Bump allocator for per-forward scratch (activations). Sized once for the largest
// batch the model is asked to run; reset() at the start of each forward, so the
// decode loop never touches the heap.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace mx {

class Arena {
 public:
  Arena() = default;
  explicit Arena(size_t bytes) : buf_(bytes) {}

  // Grows only when empty (between forwards); a growth is a heap allocation,
  // which happens when a larger batch shape is first seen, never per token.
  void reserve(size_t bytes) {
    MX_CHECK(used_ == 0, "Arena::reserve while in use");
    // Geometric growth: a context that grows by one token per step reallocates
    // O(log n) times, not every step.
    if (bytes > buf_.size()) buf_ = Buffer(std::max(bytes, buf_.size() * 2));
  }
  void reset() { used_ = 0; }
  // Scratch that lives for one layer: take a mark, allocate, rewind.
  size_t mark() const { return used_; }
  void rewind(size_t m) { used_ = m; }
  size_t capacity() const { return buf_.size(); }
  size_t used() const { return used_; }

  template <typename T = float>
  T* alloc(size_t n) {
    size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    MX_CHECK(used_ + bytes <= buf_.size(), "arena overflow: need {} more bytes, capacity {}",
             used_ + bytes - buf_.size(), buf_.size());
    T* p = reinterpret_cast<T*>(static_cast<char*>(buf_.data()) + used_);
    used_ += bytes;
    return p;
  }

 private:
  Buffer buf_;
  size_t used_ = 0;
};

}  // namespace mx
