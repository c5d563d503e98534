#pragma once
// A progress bar on stderr: redrawn in place on a terminal, one line per 25%
// otherwise (logs stay short). Thread-safe.
#include <chrono>
#include <mutex>
#include <string>

namespace mx::bench {

class Progress {
 public:
  explicit Progress(bool enabled = true);
  void start(const std::string& label, int total);
  void tick(bool ok);  // one request finished
  void finish();

 private:
  void draw(bool final);
  bool enabled_, tty_;
  std::mutex mu_;
  std::string label_;
  int total_ = 0, done_ = 0, failed_ = 0, last_quarter_ = -1;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace mx::bench
