#pragma once
// The GPU backends a test can run on: compiled in and with a device (in CI:
// HIP on the HIP-CPU runtime).
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace mxtest {

inline std::vector<std::string> gpu_backends() {
  std::vector<std::string> v;
  for (const std::string& k : mx::compiled_backends())
    if (k != "cpu" && mx::backend_device_count(k) > 0) v.push_back(k);
  return v;
}

}  // namespace mxtest
