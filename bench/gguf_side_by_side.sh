#!/bin/bash
# Side by side with llama.cpp (not in CI): the same GGUF files, same threads,
# alternating engines so both see the same machine load. Prints one line per
# run with the load average; read the medians. Needs an external llama.cpp
# build (docs/gguf.md); nothing of llama.cpp lives in this repo.
#   bench/gguf_side_by_side.sh LLAMA_BENCH ROUNDS MODEL.gguf...
set -euo pipefail
LB=$1; ROUNDS=$2; shift 2
PP=${PP:-64}; TG=${TG:-32}; T=${T:-2}
for m in "$@"; do
  for r in $(seq 1 "$ROUNDS"); do
    echo "== $(basename "$m") round $r load $(cut -d' ' -f1 /proc/loadavg)"
    MXSERVE_THREADS=$T build/bench_decode "$m" --prompt "$PP" --tokens "$TG" 2>&1 | grep -E '^(prefill|decode)' | sed 's/^/mxserve  /'
    OMP_WAIT_POLICY=passive "$LB" -m "$m" -t "$T" -p "$PP" -n "$TG" -r 1 -o csv 2>/dev/null |
      awk -F, 'NR>1 {gsub(/"/,""); printf "llama.cpp n_prompt=%s n_gen=%s %s tok/s\n", $(NF-7), $(NF-6), $(NF-1)}' || true
  done
done
