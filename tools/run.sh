#!/usr/bin/env bash
# The main job with defaults that need nothing but the repo: install, build, then
# show the real thing on stories260K (../shared/models, a real trained Llama with
# its llama2.c tokenizer tok512.bin beside it):
#   1. 256 greedy tokens from BOS, checked against llama2.c run.c's reference ids;
#   2. a text prompt and its greedy continuation, as text (checked against run.c's
#      output for the same prompt);
#   3. `mxserve serve` answering one /v1/completions request with a text prompt;
# then generate from a synthetic Qwen3 checkpoint written by make-test-model.
# Usage: tools/run.sh [MODEL [PROMPT_TEXT [MAX_TOKENS]]]
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/build.sh
SHARED=${MXSERVE_SHARED:-../shared}
STORIES=$SHARED/models/stories260K
MODEL=${1:-$STORIES/stories260K.bin}
PROMPT=${2:-Lily and Ben went to the park.}
MAX=${3:-40}

if [ $# -eq 0 ]; then
  echo "== mxserve generate --model $MODEL --prompt-ids 1 --max-tokens 256 --temperature 0 --print-ids"
  build/mxserve generate --model "$MODEL" --prompt-ids 1 --max-tokens 256 --temperature 0 --print-ids | tee build/run-ids.txt
  if diff -q <(tr ' ' '\n' < build/run-ids.txt) "$STORIES/greedy_ids_from_bos.txt" >/dev/null; then
    echo "== identical to llama2.c's reference ids"
  else
    echo "== MISMATCH against $STORIES/greedy_ids_from_bos.txt"; exit 1
  fi
fi

echo "== mxserve generate --model $MODEL --prompt '$PROMPT' --max-tokens $MAX --temperature 0"
build/mxserve generate --model "$MODEL" --prompt "$PROMPT" --max-tokens "$MAX" --temperature 0 | tee build/run-text.txt
if [ $# -eq 0 ]; then
  if cmp -s build/run-text.txt tests/data/stories260K-goldens/lily_and_ben_greedy40.txt; then
    echo "== identical to llama2.c run.c's output for this prompt"
  else
    echo "== MISMATCH against tests/data/stories260K-goldens/lily_and_ben_greedy40.txt"; exit 1
  fi
fi

echo "== mxserve serve --model $MODEL --port 0, then one /v1/completions request"
LOG=build/run-serve.log
build/mxserve serve --model "$MODEL" --port 0 --served-model-name stories 2> "$LOG" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
PORT=""
for _ in $(seq 1 100); do
  PORT=$(sed -n 's|.* on http://127.0.0.1:\([0-9]*\).*|\1|p' "$LOG" | head -1)
  [ -n "$PORT" ] && break
  kill -0 $SERVER 2>/dev/null || { cat "$LOG"; exit 1; }
  sleep 0.1
done
[ -n "$PORT" ] || { echo "== the server did not start"; cat "$LOG"; exit 1; }
head -1 "$LOG"
BODY=$(/usr/bin/python3 -c 'import json, sys
print(json.dumps({"model": "stories", "prompt": sys.argv[1], "max_tokens": int(sys.argv[2]), "temperature": 0}))' "$PROMPT" "$MAX")
echo "curl -s localhost:$PORT/v1/completions -d '$BODY'"
curl -s "localhost:$PORT/v1/completions" -H 'Content-Type: application/json' -d "$BODY" |
  /usr/bin/python3 -c 'import json, sys
r = json.load(sys.stdin)
c = r["choices"][0]
print("text:", json.dumps(c["text"]))
print("finish_reason:", c["finish_reason"], " usage:", json.dumps(r["usage"]))'
kill -TERM $SERVER
wait $SERVER
trap - EXIT

if [ $# -eq 0 ]; then
  build/mxserve make-test-model --arch qwen3 --preset small --out build/models/qwen3-small --force
  echo "== mxserve generate --model build/models/qwen3-small (synthetic, random weights)"
  build/mxserve generate --model build/models/qwen3-small --prompt-ids "1 2 3" --max-tokens 64 --temperature 0.8 --seed 1
fi
