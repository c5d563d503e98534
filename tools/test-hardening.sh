#!/usr/bin/env bash
# The hardening part of CI (called by tools/test.sh after the main suite):
#  1. one clang build in build-asan/ with ASan + UBSan and libFuzzer coverage
#     (-DMXSERVE_FUZZ=ON): the test suite and the fuzz/ targets;
#  2. the whole test suite under the sanitizers (about 2.5 min of test time on
#     2 loaded cores; MXSERVE_ASAN_TESTS=REGEX narrows it to a ctest -R subset);
#  3. every fuzz target for MXSERVE_FUZZ_SECONDS (default 10) from its committed
#     seed corpus (fuzz/corpus/<target>/). A crash fails the run and leaves its
#     input in build-asan/fuzz-artifacts/: fix the bug, then keep the input in
#     tests/data/fuzz-regressions/<target>/ (tests/fuzz replays it in every build).
# MXSERVE_HARDENING=0 skips all of it.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${MXSERVE_HARDENING:-1}" = 0 ] && { echo "hardening: skipped (MXSERVE_HARDENING=0)"; exit 0; }
FUZZ_SECONDS=${MXSERVE_FUZZ_SECONDS:-10}
CXX_CLANG=${MXSERVE_CLANG:-clang++-14}

CXX=$CXX_CLANG cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DMXSERVE_FUZZ=ON -DMXSERVE_BENCH=OFF \
  -DMXSERVE_CUDA=OFF -DMXSERVE_HIP=OFF -DMXSERVE_HIP_CPU=OFF >/dev/null  # GPU code: compiled and checked by the main build
cmake --build build-asan -j"$(nproc)"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
SUBSET=${MXSERVE_ASAN_TESTS:-.}
echo "== test suite under ASan + UBSan (ctest -R '$SUBSET')"
echo "   (the GPU-backend tests skip here: this build has no HIP-CPU backend; they ran on HIP-CPU in the main build."
echo "    Cli.RunsOnACpuWithoutAvx512 skips too: qemu-user cannot hold ASan's shadow memory; it ran in the main build)"
tools/run-ctest.sh build-asan --output-on-failure -j"$(nproc)" --timeout 900 -R "$SUBSET"

echo "== fuzz: ${FUZZ_SECONDS}s per target"
art=build-asan/fuzz-artifacts
mkdir -p "$art"
failed=()
total=0
for bin in build-asan/fuzz_*; do
  t=${bin#build-asan/fuzz_}
  work=$(mktemp -d)
  total=$((total + 1))
  # New inputs go to a scratch directory; the committed corpus is only read.
  if "$bin" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
       -artifact_prefix="$art/$t-" -print_final_stats=1 "$work" "fuzz/corpus/$t" >"$art/$t.log" 2>&1; then
    echo "fuzz $t: ok ($(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$art/$t.log" | grep -o '[0-9]*$') runs, no crash)"
  else
    echo "fuzz $t: CRASH (log $art/$t.log)"; tail -40 "$art/$t.log"; failed+=("$t")
  fi
  rm -rf "$work"
done
echo "fuzz: $((total - ${#failed[@]}))/$total targets ran ${FUZZ_SECONDS}s without a crash"
[ ${#failed[@]} -eq 0 ]
