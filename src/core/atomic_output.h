#pragma once
// Outputs that are either complete or not there: what `quantize` and
// `convert` write. A new file or directory is written under a unique temporary
// name beside its target (mkstemp / mkdtemp: two writers never share one),
// fsynced, then renamed into place, so a killed run leaves the previous output
// as it was (and at worst a stale temporary, named TARGET.tmp-XXXXXX), and a
// reader that has the old file mmapped keeps reading the old bytes. An
// existing target is replaced only when the caller says so (--force): a
// directory by an atomic exchange (renameat2 RENAME_EXCHANGE) and the old one
// removed after, a file by rename.
#include <string>

namespace mx {

// Refuses (mx::Error naming the flag) an existing target unless force, and a
// target that is one of the inputs' paths whatever force says.
void check_output_target(const std::string& target, bool force, const std::string& input,
                         const std::string& flag = "--out");
// Only the second: the target is not the input, a file of the input directory, nor holds the input.
void check_not_input(const std::string& target, const std::string& input, const std::string& flag = "--out");

class AtomicFile {
 public:
  explicit AtomicFile(const std::string& target);
  ~AtomicFile();  // removes the temporary unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  const std::string& temp_path() const { return temp_; }
  int fd() const { return fd_; }
  void write(const void* data, size_t n);  // throws naming the target (disk full, ...)
  void commit();                           // fsync, rename over the target, fsync the directory

 private:
  std::string target_, temp_;
  int fd_ = -1;
  bool done_ = false;
};

class AtomicDir {
 public:
  explicit AtomicDir(const std::string& target);
  ~AtomicDir();  // removes the temporary directory unless committed
  AtomicDir(const AtomicDir&) = delete;
  AtomicDir& operator=(const AtomicDir&) = delete;
  const std::string& path() const { return temp_; }  // write the output here
  void commit();  // fsync every file and the directory, then put it in the target's place

 private:
  std::string target_, temp_;
  bool done_ = false;
};

}  // namespace mx
