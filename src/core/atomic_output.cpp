#include "core/atomic_output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace fs = std::filesystem;

namespace mx {

namespace {

void fsync_path(const fs::path& p, bool dir) {
  const int fd = ::open(p.c_str(), (dir ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
  MX_CHECK(fd >= 0, "cannot open {} to sync it: {}", p.string(), std::strerror(errno));
  const int r = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  MX_CHECK(r == 0, "cannot sync {} to disk: {}", p.string(), std::strerror(err));
}

fs::path parent_of(const fs::path& p) {
  const fs::path a = fs::absolute(p);
  return a.has_parent_path() ? a.parent_path() : fs::path(".");
}

bool same_path(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

}  // namespace

void check_not_input(const std::string& target, const std::string& input, const std::string& flag) {
  const fs::path t(target), in(input);
  MX_CHECK(!target.empty(), "{} is empty", flag);
  if (input.empty()) return;
  MX_CHECK(!same_path(t, in), "{} {} is the input model: write the output elsewhere", flag, target);
  // A file inside the input directory (its own safetensors), or the input inside the target.
  std::error_code ec;
  if (fs::is_directory(in, ec)) {
    MX_CHECK(!same_path(parent_of(t), in) || !fs::exists(t, ec), "{} {} would overwrite a file of the input model {}",
             flag, target, input);
  }
  if (fs::is_directory(t, ec) && fs::exists(in, ec)) {
    const fs::path rel = fs::relative(fs::weakly_canonical(in, ec), fs::weakly_canonical(t, ec), ec);
    MX_CHECK(ec || rel.empty() || *rel.begin() == "..", "{} {} holds the input {}: write the output elsewhere", flag,
             target, input);
  }
}

void check_output_target(const std::string& target, bool force, const std::string& input, const std::string& flag) {
  check_not_input(target, input, flag);
  std::error_code ec;
  const fs::path t(target);
  if (fs::exists(t, ec) && !(fs::is_directory(t, ec) && fs::is_empty(t, ec)))
    MX_CHECK(force, "{} {} exists: pass --force to replace it (the new output replaces it only once complete)", flag,
             target);
}

AtomicFile::AtomicFile(const std::string& target) : target_(target) {
  std::string tmpl = target + ".tmp-XXXXXX";
  fd_ = ::mkstemp(tmpl.data());
  MX_CHECK(fd_ >= 0, "cannot create a temporary file beside {}: {}", target, std::strerror(errno));
  ::fchmod(fd_, 0644);
  temp_ = tmpl;
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!done_) ::unlink(temp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    MX_CHECK(w > 0, "writing {} failed: {}", target_, w < 0 ? std::strerror(errno) : "no progress (disk full?)");
    p += w, n -= size_t(w);
  }
}

void AtomicFile::commit() {
  MX_CHECK(::fsync(fd_) == 0, "cannot sync {} to disk: {}", target_, std::strerror(errno));
  MX_CHECK(::close(fd_) == 0, "writing {} failed: {}", target_, std::strerror(errno));
  fd_ = -1;
  MX_CHECK(::rename(temp_.c_str(), target_.c_str()) == 0, "cannot rename {} to {}: {}", temp_, target_,
           std::strerror(errno));
  done_ = true;
  fsync_path(parent_of(target_), true);
}

AtomicDir::AtomicDir(const std::string& target) : target_(fs::path(target).lexically_normal().string()) {
  if (!target_.empty() && target_.back() == '/') target_.pop_back();
  std::error_code ec;
  fs::create_directories(parent_of(target_), ec);
  std::string tmpl = target_ + ".tmp-XXXXXX";
  MX_CHECK(::mkdtemp(tmpl.data()), "cannot create a temporary directory beside {}: {}", target, std::strerror(errno));
  ::chmod(tmpl.c_str(), 0755);
  temp_ = tmpl;
}

AtomicDir::~AtomicDir() {
  if (done_) return;
  std::error_code ec;
  fs::remove_all(temp_, ec);
}

void AtomicDir::commit() {
  for (const auto& e : fs::directory_iterator(temp_))
    if (e.is_regular_file()) fsync_path(e.path(), false);
  fsync_path(temp_, true);
  std::error_code ec;
  if (fs::exists(target_, ec)) {
    // Swap the complete new directory with the old one in one step, then remove the old.
    if (::renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) == 0) {
      done_ = true;
      fs::remove_all(temp_, ec);  // now the old output
      fsync_path(parent_of(target_), true);
      return;
    }
    // A filesystem without exchange: move the old one aside first (a crash between
    // the two renames leaves it at TARGET.old-XXXXXX).
    std::string old = target_ + ".old-XXXXXX";
    MX_CHECK(::mkdtemp(old.data()), "cannot create a directory beside {}: {}", target_, std::strerror(errno));
    fs::remove(old, ec);
    MX_CHECK(::rename(target_.c_str(), old.c_str()) == 0, "cannot move {} aside: {}", target_, std::strerror(errno));
    MX_CHECK(::rename(temp_.c_str(), target_.c_str()) == 0, "cannot rename {} to {}: {}", temp_, target_,
             std::strerror(errno));
    done_ = true;
    fs::remove_all(old, ec);
  } else {
    MX_CHECK(::rename(temp_.c_str(), target_.c_str()) == 0, "cannot rename {} to {}: {}", temp_, target_,
             std::strerror(errno));
    done_ = true;
  }
  fsync_path(parent_of(target_), true);
}

}  // namespace mx
