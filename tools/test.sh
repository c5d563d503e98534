#!/usr/bin/env bash
# The whole test suite: install dependencies, build, run every test under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/build.sh
# The GPU backends compile wherever their compilers are (nvcc at /usr/local/cuda,
# Debian's hipcc); say which did, so a dropped one shows in the CI log.
echo "gpu backends compiled: $(ls build/libmxgpu_*.a 2>/dev/null | sed 's/.*libmxgpu_//; s/\.a$//' | tr '\n' ' ')"
tools/run-ctest.sh build --output-on-failure -j"$(nproc)" --timeout 600
# The suite again with the AMX kernels' scheme on software tiles (MXSERVE_AMX=emulate):
# what an AMX machine runs, which CI machines mostly are not. Needs AVX512-BF16.
if grep -qw avx512_bf16 /proc/cpuinfo; then
  echo "== test suite with BF16 / FP8 weights on emulated AMX tiles (MXSERVE_AMX=emulate)"
  MXSERVE_AMX=emulate tools/run-ctest.sh build --output-on-failure -j"$(nproc)" --timeout 900
else
  echo "== skipped: the suite on emulated AMX tiles (MXSERVE_AMX=emulate needs AVX512-BF16; this CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2))"
fi
tools/test-hardening.sh
