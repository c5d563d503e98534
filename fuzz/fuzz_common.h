#pragma once
// Shared by the libFuzzer targets (fuzz/*.cpp, built with -DMXSERVE_FUZZ=ON).
// A target feeds its input to one parser the way mxserve does. mx::Error is
// the documented way to refuse input and is swallowed; anything else escaping
// (std::bad_alloc, a JSON library exception, std::out_of_range, ...) aborts
// the run, so libFuzzer records it as a crash, as it does for ASan/UBSan reports.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace mxfuzz {

inline std::string as_string(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// Runs f; mx::Error (and types derived from it) is an accepted refusal.
template <typename F>
void refusal_ok(F&& f) {
  try {
    f();
  } catch (const mx::Error&) {
  }
}

}  // namespace mxfuzz
