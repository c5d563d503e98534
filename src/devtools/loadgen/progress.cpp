#include "devtools/loadgen/progress.h"

#include <unistd.h>

#include <cstdio>
#include <string>

namespace mx::bench {

Progress::Progress(bool enabled) : enabled_(enabled), tty_(isatty(STDERR_FILENO)) {}

void Progress::start(const std::string& label, int total) {
  std::lock_guard<std::mutex> lk(mu_);
  label_ = label;
  total_ = total;
  done_ = failed_ = 0;
  last_quarter_ = -1;
  t0_ = std::chrono::steady_clock::now();
  draw(false);
}

void Progress::tick(bool ok) {
  std::lock_guard<std::mutex> lk(mu_);
  ++done_;
  if (!ok) ++failed_;
  draw(false);
}

void Progress::finish() {
  std::lock_guard<std::mutex> lk(mu_);
  // Off a terminal the last quarter's line already says it all, unless the run stopped early.
  if (tty_ || done_ < total_) draw(true);
}

void Progress::draw(bool final) {
  if (!enabled_ || total_ <= 0) return;
  const int quarter = done_ * 4 / total_;
  if (!tty_ && !final && quarter == last_quarter_) return;
  last_quarter_ = quarter;
  constexpr int width = 30;
  const int filled = done_ * width / total_;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  std::string bar(size_t(filled), '#');
  bar.append(size_t(width - filled), '.');
  std::fprintf(stderr, "%s%s [%s] %d/%d requests%s %.1fs%s", tty_ ? "\r" : "", label_.c_str(), bar.c_str(), done_,
               total_, failed_ ? (", " + std::to_string(failed_) + " failed").c_str() : "", s,
               (tty_ && !final) ? "" : "\n");
  std::fflush(stderr);
}

}  // namespace mx::bench
