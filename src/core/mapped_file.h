#pragma once
// Read-only memory map of a whole file. Weights stay in the page cache and are
// viewed in place; nothing is copied unless a format conversion is needed.
#include <cstddef>
#include <cstdint>
#include <string>

namespace mx {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws mx::Error with the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Drops every live mapping's pages from this process's resident set
  // (madvise DONTNEED; the maps are read-only, so a later access just faults
  // the page back in from the page cache). A tensor-parallel rank calls it
  // after binding, so what stays resident is what its shard reads.
  static void release_all_resident();

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace mx
