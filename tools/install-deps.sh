#!/usr/bin/env bash
# Installs the Debian packages mxserve builds and tests with (Debian 12).
# Skips apt entirely when everything is already there.
set -euo pipefail
PKGS=(g++ cmake ninja-build pkg-config
      libfmt-dev nlohmann-json3-dev libcli11-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      libcpp-httplib-dev libssl-dev zlib1g-dev libbrotli-dev
      libboost1.81-dev  # Beast/Asio: the server's HTTP transport (libboost-dev is 1.74 on Debian 12)
      openmpi-bin libopenmpi-dev
      python3-numpy python3-torch libopenblas0-pthread  # torch: Debian's generic BLAS is ~100x slower
      clang-14 libclang-rt-14-dev   # sanitizer + libFuzzer build (tools/test-hardening.sh)
      hipcc libamdhip64-dev rocm-device-libs  # the HIP backend, compiled (no GPU needed)
      libtbb-dev  # the HIP-CPU runtime (../shared/third_party/hip-cpu) runs the HIP kernels on the CPU
      qemu-user)  # a CPU without AVX-512 for one test (tests/cli/test_without_avx512.cpp)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
