#include "cli/auto_tune.h"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <system_error>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"

extern char** environ;

namespace mx::cli {

namespace fs = std::filesystem;

std::string tune_cache_dir() {
  if (const char* d = std::getenv("MXSERVE_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "mxserve").string();
  const char* home = std::getenv("HOME");
  MX_CHECK(home && *home, "--auto-tune: no cache folder (set MXSERVE_CACHE_DIR, XDG_CACHE_HOME or HOME)");
  return (fs::path(home) / ".cache" / "mxserve").string();
}

namespace {

// Names the model by its absolute path and its modification time, so a model
// rewritten in place is tuned again.
std::string model_tag(const std::string& model) {
  std::error_code ec;
  const fs::path p = fs::canonical(model, ec);
  MX_CHECK(!ec, "--auto-tune: model {}: {}", model, ec.message());
  const auto mtime = fs::last_write_time(p, ec).time_since_epoch().count();
  return fmt::format("{:016x}", std::hash<std::string>{}(p.string() + "@" + std::to_string(mtime)));
}

// Runs this binary's `tune` with args; its exit status (-1 if it could not start).
int run_tune(const std::vector<std::string>& args) {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  std::vector<char*> argv{const_cast<char*>(self.c_str())};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

std::string auto_tune_file(const std::string& model) {
  const fs::path dir = tune_cache_dir();
  const fs::path file = dir / fmt::format("kernels-{}-{}-{}.json", cpu_key(), isa_name(best_isa()), model_tag(model));
  if (fs::exists(file)) {
    fmt::print(stderr, "auto-tune: kernel configs for this machine and model from {}\n", file.string());
    return file.string();
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  MX_CHECK(!ec, "--auto-tune: cannot create {}: {}", dir.string(), ec.message());
  const fs::path tmp = file.string() + fmt::format(".tmp-{}", getpid());
  fmt::print(stderr, "auto-tune: first run of {} on this machine: mxserve tune --model {} --isas {}\n", model, model,
             isa_name(best_isa()));
  const int rc = run_tune({"tune", "--model", model, "--isas", isa_name(best_isa()), "--out", tmp.string(), "--replace"});
  if (rc != 0) {
    fs::remove(tmp, ec);
    fmt::print(stderr, "warning: auto-tune: mxserve tune exited with {}; running on the built-in kernel table\n", rc);
    return "";
  }
  fs::rename(tmp, file, ec);  // atomic: a concurrent first run writes the same content
  MX_CHECK(!ec, "--auto-tune: cannot write {}: {}", file.string(), ec.message());
  fmt::print(stderr, "auto-tune: saved {}\n", file.string());
  return file.string();
}

}  // namespace mx::cli
