#!/usr/bin/env bash
# The whole test suite: install dependencies, build, run every test under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 600
cd ..
tools/test-hardening.sh
