#pragma once
// Read-only memory map of a whole file. Weights stay in the page cache and are
// viewed in place; nothing is copied unless a format conversion is needed.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace mx {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws mx::Error with the path
  // Bytes already in memory, viewed as a file named `name` (fuzzers and tests
  // parse buffers through the same code as mapped files).
  static std::shared_ptr<MappedFile> from_bytes(std::string name, std::string bytes);
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

  // While one is alive, files this thread maps are not prefaulted
  // (MAP_POPULATE off): a tensor- or expert-parallel rank, or a device backend,
  // reads only some of the checkpoint's pages once (its share, uploaded), so
  // populating would fault in the whole file on every rank.
  struct Lazy {
    Lazy();
    ~Lazy();
    Lazy(const Lazy&) = delete;
    Lazy& operator=(const Lazy&) = delete;
  };

 private:
  MappedFile() = default;
  std::string path_;
  std::string owned_;  // from_bytes: the bytes data_ points into (nothing is mapped)
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
};

}  // namespace mx
