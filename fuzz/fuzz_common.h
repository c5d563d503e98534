#pragma once
// Shared by the libFuzzer targets (fuzz/*.cpp, built with -DMXSERVE_FUZZ=ON).
// A target feeds its input to one parser the way mxserve does. Each file
// defines its body with MXFUZZ_TARGET(name): a fuzzer binary gets it as
// LLVMFuzzerTestOneInput; the test suite (MXFUZZ_NO_MAIN) registers it by name
// and replays the seed corpus and every kept crash through it
// (tests/fuzz/test_fuzz_regressions.cpp). mx::Error is
// the documented way to refuse input and is swallowed; anything else escaping
// (std::bad_alloc, a JSON library exception, std::out_of_range, ...) aborts
// the run, so libFuzzer records it as a crash, as it does for ASan/UBSan reports.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "core/error.h"

namespace mxfuzz {

using TargetFn = int (*)(const uint8_t* data, size_t size);
// Every target linked into this binary, by name (fuzz/<name>.cpp).
inline std::map<std::string, TargetFn>& targets() {
  static std::map<std::string, TargetFn> m;
  return m;
}
struct Register {
  Register(const char* name, TargetFn fn) { targets()[name] = fn; }
};

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

#ifdef MXFUZZ_NO_MAIN
#define MXFUZZ_ENTRY(name)                                                      \
  static const ::mxfuzz::Register mxfuzz_register_##name(#name, mxfuzz_##name);
#else
#define MXFUZZ_ENTRY(name) \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return mxfuzz_##name(data, size); }
#endif
// MXFUZZ_TARGET(name) { ...body using data, size...; return 0; }
#define MXFUZZ_TARGET(name)                                   \
  static int mxfuzz_##name(const uint8_t* data, size_t size); \
  MXFUZZ_ENTRY(name)                                          \
  static int mxfuzz_##name(const uint8_t* data, size_t size)
