#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>

#include "core/error.h"

namespace mx {

namespace {
std::mutex live_mu;
std::set<const MappedFile*>& live() {
  static std::set<const MappedFile*> s;
  return s;
}
thread_local int tl_lazy = 0;  // MappedFile::Lazy scopes alive on this thread
}  // namespace

MappedFile::Lazy::Lazy() { ++tl_lazy; }
MappedFile::Lazy::~Lazy() { --tl_lazy; }

void MappedFile::release_all_resident() {
  std::lock_guard<std::mutex> lk(live_mu);
  for (const MappedFile* f : live())
    if (f->mapped_) ::madvise(const_cast<uint8_t*>(f->data_), f->size_, MADV_DONTNEED);
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{} is not a regular file", path);
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    // MAP_POPULATE maps every page up front: one bulk pass at load instead of a
    // page fault per 4 KiB the first time a forward touches a weight; not
    // inside a Lazy scope, where only a share of the pages is ever read.
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | (tl_lazy ? 0 : MAP_POPULATE), fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      fail("cannot mmap {}: {}", path, std::strerror(errno));
    }
    data_ = static_cast<const uint8_t*>(p);
    mapped_ = true;
  }
  ::close(fd);
  std::lock_guard<std::mutex> lk(live_mu);
  live().insert(this);
}

std::shared_ptr<MappedFile> MappedFile::from_bytes(std::string name, std::string bytes) {
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = std::move(name);
  f->owned_ = std::move(bytes);
  f->size_ = f->owned_.size();
  f->data_ = reinterpret_cast<const uint8_t*>(f->owned_.data());
  return f;
}

MappedFile::~MappedFile() {
  {
    std::lock_guard<std::mutex> lk(live_mu);
    live().erase(this);
  }
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace mx
