#include "cli/auto_tune.h"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <system_error>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "backends/cpu/matmul.h"

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

// Names the model by its absolute path and the size and modification time of
// the file, or of each file in its directory (config.json, the safetensors
// shards...), so a model rewritten in place is tuned again.
std::string model_tag(const std::string& model) {
  std::error_code ec;
  const fs::path p = fs::canonical(model, ec);
  MX_CHECK(!ec, "--auto-tune: model {}: {}", model, ec.message());
  std::string id = p.string();
  auto add = [&](const fs::path& f) {
    std::error_code e;
    id += fmt::format("|{}:{}:{}", f.filename().string(), fs::file_size(f, e),
                      fs::last_write_time(f, e).time_since_epoch().count());
  };
  if (fs::is_directory(p, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(p, ec))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) add(f);
  } else {
    add(p);
  }
  return fmt::format("{:016x}", std::hash<std::string>{}(id));
}

// Runs this binary's `tune` with args; its exit status (-1 if it could not start).
int run_tune(const std::vector<std::string>& args) {
  std::error_code ec;
  const std::string self = fs::read_symlink("/proc/self/exe", ec).string();
  if (ec) return -1;
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
  // What the measurement depends on besides the model: the machine, the ISA, the
  // product bf16 weights take (backends/cpu/matmul.h) and the thread count.
  const int threads = global_pool().size();
  const std::string amx = matmul_amx_name(best_isa());
  const fs::path file = fs::path(tune_cache_dir()) /
                        fmt::format("kernels-{}-{}{}{}{}-t{}-{}.json", cpu_key(), isa_name(best_isa()),
                                    matmul_bf16_activations(best_isa()) ? "-bf16act" : "", amx.empty() ? "" : "-",
                                    amx, threads, model_tag(model));
  auto give_up = [](const std::string& why) {
    fmt::print(stderr, "warning: auto-tune: {}; running on the built-in kernel table\n", why);
    return std::string();
  };
  std::error_code ec;
  if (fs::exists(file, ec)) {
    fmt::print(stderr, "auto-tune: kernel configs for this machine and model from {}\n", file.string());
    return file.string();
  }
  fs::create_directories(file.parent_path(), ec);
  if (ec) return give_up(fmt::format("cannot create {}: {}", file.parent_path().string(), ec.message()));
  const fs::path tmp = file.string() + fmt::format(".tmp-{}", getpid());
  fmt::print(stderr, "auto-tune: first run of {} here: mxserve tune --model {} --isas {} --threads {}\n", model,
             model, isa_name(best_isa()), threads);
  const int rc = run_tune({"tune", "--model", model, "--isas", isa_name(best_isa()), "--threads",
                           std::to_string(threads), "--out", tmp.string(), "--replace"});
  if (rc != 0) {
    fs::remove(tmp, ec);
    return give_up(fmt::format("mxserve tune exited with {}", rc));
  }
  // Atomic, and the name is this process's own until then. Two first runs at once
  // both tune (each timing the other's load too) and the last rename wins.
  fs::rename(tmp, file, ec);
  if (ec) return give_up(fmt::format("cannot write {}: {}", file.string(), ec.message()));
  fmt::print(stderr, "auto-tune: saved {}\n", file.string());
  return file.string();
}

}  // namespace mx::cli
