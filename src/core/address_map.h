#pragma once
// Maps keyed by the start address of a byte range (a checkpoint tensor in a
// mapping, a reserved placeholder): which entry, if any, holds a given address.
#include <cstddef>
#include <map>

namespace mx {

// The entry of m whose range [start, start + bytes(value)) holds p; m.end() if
// none does (or p is null).
template <class V, class Bytes>
typename std::map<const char*, V>::const_iterator range_holding(const std::map<const char*, V>& m, const void* p,
                                                                 Bytes bytes) {
  const char* c = static_cast<const char*>(p);
  auto it = m.upper_bound(c);
  if (!c || it == m.begin()) return m.end();
  --it;
  return size_t(c - it->first) < bytes(it->second) ? it : m.end();
}

}  // namespace mx
