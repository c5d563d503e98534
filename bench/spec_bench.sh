#!/usr/bin/env bash
# Single-stream speculative decoding, one run: tok/s with --speculative off,
# ngram and mtp, acceptance, tokens per verification round and the speedup
# over off, for each MODEL[:HEAD] given (HEAD: a trained --mtp-head, or - for
# none). Prints a table; decides nothing.
#   bench/spec_bench.sh [--steps K] [--tokens N] [--threads T] [--prompt-ids IDS] MODEL[:HEAD] ...
# Default: stories260K with its committed trained head.
set -euo pipefail
cd "$(dirname "$0")/.."
K=3 N=256 T=1 PROMPT=1
models=()
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) K=$2; shift 2 ;;
    --tokens) N=$2; shift 2 ;;
    --threads) T=$2; shift 2 ;;
    --prompt-ids) PROMPT=$2; shift 2 ;;
    -*) echo "unknown option $1"; exit 2 ;;
    *) models+=("$1"); shift ;;
  esac
done
[ ${#models[@]} -gt 0 ] || models=("../shared/models/stories260K/stories260K.bin:tests/data/stories260K-mtp/mtp_head.safetensors")
BIN=build/mxserve
echo "k=$K, $N tokens, $T thread(s), greedy, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
printf "%-28s %-6s %9s %8s %10s %8s\n" model mode "tok/s" accept "tok/round" speedup
for spec in "${models[@]}"; do
  model=${spec%%:*}
  head=-
  [ "$spec" != "$model" ] && head=${spec#*:}
  headarg=()
  [ "$head" != - ] && headarg=(--mtp-head "$head")
  base=
  # Warm-up (page cache, first-touch of the weights): not timed.
  $BIN generate --model "$model" "${headarg[@]}" --prompt-ids "$PROMPT" --max-tokens 8 --temperature 0 \
    --threads "$T" >/dev/null 2>&1
  for mode in off ngram mtp; do
    if [ "$mode" = mtp ] && [ "$head" = - ] && ! $BIN inspect --model "$model" 2>/dev/null | grep -q "mtp layers: [1-9]"; then
      continue
    fi
    log=$($BIN generate --model "$model" "${headarg[@]}" --prompt-ids "$PROMPT" --max-tokens "$N" --temperature 0 \
      --ignore-eos --threads "$T" --speculative "$mode" --spec-steps "$K" 2>&1 >/dev/null)
    tps=$(grep -o 'generated [0-9]* tokens in [0-9.]* s ([0-9.]* tok/s)' <<<"$log" | grep -o '([0-9.]*' | tr -d '(')
    acc=$(grep -o 'accepted ([0-9.]*%)' <<<"$log" | grep -o '[0-9.]*%' || echo -)
    per=$(grep -o '[0-9.]* tokens per round' <<<"$log" | cut -d' ' -f1 || echo 1.00)
    [ -z "$base" ] && base=$tps
    printf "%-28s %-6s %9s %8s %10s %7.2fx\n" "$(basename "$model")" "$mode" "$tps" "$acc" "${per:-1.00}" \
      "$(awk -v a="$tps" -v b="$base" 'BEGIN { print a / b }')"
  done
done
