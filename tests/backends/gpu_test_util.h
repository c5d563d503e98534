#pragma once
// The GPU backends a test can run on: compiled in and with a device (in CI:
// HIP on the HIP-CPU runtime).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/backend.h"
#include "test_util.h"

namespace mxtest {

inline std::vector<std::string> gpu_backends() {
  std::vector<std::string> v;
  for (const std::string& k : mx::compiled_backends())
    if (k != "cpu" && mx::backend_device_count(k) > 0) v.push_back(k);
  return v;
}

// Whether this build compiled any GPU backend in: the main build does (and
// HIP-CPU gives it a device), the sanitizer build does not (tools/test-hardening.sh).
inline bool gpu_backends_compiled() {
  for (const std::string& k : mx::compiled_backends())
    if (k != "cpu") return true;
  return false;
}

// The GPU-backend tests: a build that compiles a GPU backend must have a device
// for one (HIP-CPU in CI); a build without any skips them.
#define MXTEST_NEEDS_GPU_BACKEND(gpus)                                                                  \
  do {                                                                                                \
    if (gpus.empty() && !::mxtest::gpu_backends_compiled())                                           \
      GTEST_SKIP() << "SKIPPED: this build compiles no GPU backend (the main build tests HIP-CPU)";  \
    MXTEST_NEEDS(!gpus.empty(), "a GPU backend with a device (the build compiles one; CI uses HIP-CPU)"); \
  } while (0)

}  // namespace mxtest
