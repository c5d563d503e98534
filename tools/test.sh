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
tools/test-hardening.sh
