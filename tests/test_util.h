#pragma once
// Shared helpers for the test suite: temp dirs, running the mxserve binary,
// locating ../shared test data, sampling floats.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace mxtest {

namespace fs = std::filesystem;

// Every stride-th of the 2^32 float bit patterns, from 0: with an odd stride, every
// exponent and sign, NaNs included, with varied mantissas (for conversions that
// round on the bits).
inline std::vector<float> sampled_floats(uint32_t stride) {
  std::vector<float> v;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += stride) {
    const uint32_t b = uint32_t(u);
    float f;
    std::memcpy(&f, &b, 4);
    v.push_back(f);
  }
  return v;
}

inline fs::path source_dir() { return fs::path(MX_SOURCE_DIR); }

// The project's shared data (models, tokenizer vectors): $MXSERVE_SHARED or ../shared.
inline fs::path shared_dir() {
  if (const char* e = std::getenv("MXSERVE_SHARED")) return fs::path(e);
  return source_dir().parent_path() / "shared";
}

inline fs::path stories260k() { return shared_dir() / "models" / "stories260K"; }
inline fs::path tiny1m() { return shared_dir() / "models" / "tiny1m"; }

// The repo's copy of llama.cpp's tokenizer test vectors (tests/data), else ../shared.
inline fs::path tokenizer_vectors_dir() {
  fs::path repo = source_dir() / "tests" / "data" / "tokenizer-vectors";
  if (fs::exists(repo / "ggml-vocab-gpt-2.gguf")) return repo;
  return shared_dir() / "tokenizer-vectors";
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "mxtest-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  std::string operator/(const std::string& s) const { return (path_ / s).string(); }

 private:
  fs::path path_;
};

struct CmdResult {
  int code = -1;
  std::string out;  // stdout, plus stderr when merged
};

// Runs a shell command; merge_stderr appends 2>&1.
inline CmdResult run(const std::string& cmd, bool merge_stderr = false) {
  CmdResult r;
  std::string full = cmd + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* p = popen(full.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline std::string mxserve() { return MX_BINARY; }

inline std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> v;
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void spit(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

// Debian's python3 (with python3-torch) is /usr/bin/python3, not the first one on PATH.
inline bool have_torch() {
  return run("/usr/bin/python3 -c 'import torch, numpy'").code == 0;
}

// Running under CI (CI=true, as .ci/run is run): see MXTEST_NEEDS.
inline bool in_ci() {
  const char* e = std::getenv("CI");
  return e && std::string(e) == "true";
}

// A test that needs part of the environment CI always provides (torch, node,
// the shared models, MPI, a GPU backend where the build compiles one): outside CI
// it skips, naming what is missing; under CI=true it fails, so a green CI run
// cannot hide a test that did not run. Skips for the hardware (an instruction set
// this CPU lacks) stay GTEST_SKIP.
#define MXTEST_NEEDS(cond, what)                                                  \
  do {                                                                           \
    if (!(cond)) {                                                               \
      if (::mxtest::in_ci()) GTEST_FAIL() << "CI must provide this: " << what;   \
      GTEST_SKIP() << "SKIPPED: " << what;                                       \
    }                                                                            \
  } while (0)

}  // namespace mxtest
