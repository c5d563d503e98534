#!/usr/bin/env bash
# The main job with defaults that need nothing but the repo: install, build, and
# generate 256 tokens greedily with stories260K (../shared/models, a real
# trained Llama), checking them against the reference ids; then generate from a
# synthetic Qwen3 checkpoint written by make-test-model.
# Usage: tools/run.sh [MODEL [PROMPT_IDS [MAX_TOKENS]]]
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/build.sh
SHARED=${MXSERVE_SHARED:-../shared}
MODEL=${1:-$SHARED/models/stories260K/stories260K.bin}
PROMPT=${2:-1}
MAX=${3:-256}
echo "== mxserve generate --model $MODEL --prompt-ids '$PROMPT' --max-tokens $MAX --temperature 0"
build/mxserve generate --model "$MODEL" --prompt-ids "$PROMPT" --max-tokens "$MAX" --temperature 0 | tee build/run-ids.txt
if [ $# -eq 0 ]; then
  if diff -q <(tr ' ' '\n' < build/run-ids.txt) "$SHARED/models/stories260K/greedy_ids_from_bos.txt" >/dev/null; then
    echo "== identical to llama2.c's reference ids"
  else
    echo "== MISMATCH against $SHARED/models/stories260K/greedy_ids_from_bos.txt"; exit 1
  fi
  build/mxserve make-test-model --arch qwen3 --preset small --out build/models/qwen3-small
  echo "== mxserve generate --model build/models/qwen3-small (synthetic, random weights)"
  build/mxserve generate --model build/models/qwen3-small --prompt-ids "1 2 3" --max-tokens 64 --temperature 0.8 --seed 1
fi
