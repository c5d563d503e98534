#!/usr/bin/env bash
# TP=2, EP=2 and TP=2+EP=2 under `mpirun -np 2` (two processes) give the same
# greedy tokens as one process, for the tiny glm4_moe, qwen3_moe and deepseek_v3
# (MLA); and TP=2 and EP=2 on the HIP backend (HIP-CPU) with host-staged
# collectives, for glm4_moe and deepseek_v3.
# Usage: mpi_parallel_test.sh path/to/mxserve. Exit 77 (ctest: skipped) when
# mpirun or the MPI build is missing; under CI=true that is a failure instead
# (CI installs OpenMPI: a skip there would hide a test that did not run).
set -euo pipefail
MX=$1
skip() {
  if [ "${CI:-}" = true ]; then echo "FAIL: CI must provide this: $1"; exit 1; fi
  echo "skipped: $1"; exit 77
}
command -v mpirun >/dev/null || skip "mpirun not found"
# CI containers run as root; two ranks on a 2-core machine need oversubscribe.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export MXSERVE_THREADS=1
# In the sanitizer build (tools/test-hardening.sh) OpenMPI's dlopen'd components
# leak at exit and are unloaded before LeakSanitizer reports, so no suppression
# can name them: the MPI ranks run without leak detection (ASan's other checks
# stay on); the one-process reference run keeps it.
RANK_ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PROMPT="1 17 42 99 5 250 3 8 77 123 64 2 9 31 200 11 12"
fail=0
for arch in glm4_moe qwen3_moe deepseek_v3; do
  "$MX" make-test-model --arch "$arch" --preset tiny --out "$TMP/$arch" >/dev/null
  ref=$("$MX" generate --model "$TMP/$arch" --prompt-ids "$PROMPT" --max-tokens 24 --temperature 0 --ignore-eos --print-ids)
  for par in "--tp 2" "--ep 2" "--tp 2 --ep 2"; do
    out=$(ASAN_OPTIONS=$RANK_ASAN_OPTIONS timeout 300 mpirun -np 2 --oversubscribe "$MX" generate --model "$TMP/$arch" --prompt-ids "$PROMPT" \
          --max-tokens 24 --temperature 0 --ignore-eos --comm-stats $par 2>"$TMP/err") || {
      if grep -q "built without MPI" "$TMP/err"; then skip "mxserve built without MPI"; fi
      echo "FAIL $arch $par: mpirun failed"; cat "$TMP/err"; fail=1; continue; }
    out=$(echo "$out" | head -1)
    if [ "$out" == "$ref" ]; then
      echo "ok   $arch $par: $(grep '^comm' "$TMP/err")"
    else
      echo "FAIL $arch $par"; echo " one rank: $ref"; echo " mpirun:   $out"; fail=1
    fi
  done
done
# Tensor parallel on the HIP backend (HIP-CPU in CI): host-staged collectives over MPI.
if "$MX" generate --model "$TMP/glm4_moe" --prompt-ids 1 --max-tokens 1 --backend hip >/dev/null 2>&1; then
  for arch in glm4_moe deepseek_v3; do
    ref=$("$MX" generate --model "$TMP/$arch" --prompt-ids "$PROMPT" --max-tokens 24 --temperature 0 --ignore-eos --print-ids)
    for par in "--tp 2" "--ep 2"; do
      out=$(ASAN_OPTIONS=$RANK_ASAN_OPTIONS timeout 300 mpirun -np 2 --oversubscribe "$MX" generate --model "$TMP/$arch" \
            --prompt-ids "$PROMPT" --max-tokens 24 --temperature 0 --ignore-eos --comm-stats $par --backend hip \
            2>"$TMP/err" | head -1) || true
      if [ "$out" == "$ref" ]; then echo "ok   $arch $par --backend hip: $(grep '^comm' "$TMP/err")"; else
        echo "FAIL $arch $par --backend hip"; echo " one rank: $ref"; echo " mpirun:   $out"; tail -5 "$TMP/err"; fail=1; fi
    done
  done
else
  echo "skipped: --tp 2 / --ep 2 --backend hip (this build has no HIP device: no HIP-CPU)"
fi
exit $fail
