#!/usr/bin/env bash
# The GPU checks (issues 9 and 18), prepared to run in one short call on a lent GPU
# machine (an H200 through the device tool), which starts bare and cannot
# install packages: so the binaries are built here and travel.
#
#   tools/gpu-check.sh prepare   here, no GPU needed: builds build-gpu/ (CUDA for
#                                MXSERVE_GPU_ARCHS, default 90; no MPI, no HIP) and
#                                copies the binaries and the shared libraries a bare
#                                machine may lack into gpu-check/ (git-ignored; a device
#                                call carries at most 64 MiB: prepare warns past 60)
#   tools/gpu-check.sh run       on the GPU machine, from gpu-check/: writes every
#                                result to $OUT (default gpu-check/out):
#     device.txt     nvidia-smi / rocm-smi
#     tests.txt      every GPU op against the CPU backend (GpuBackend.*), the engine
#                    on the GPU against the CPU backend on 4 families with bf16/fp8 KV
#                    (ModelOnBackends), dummy weights alike on both (DummyLoad), and
#                    `serve --backend cuda` against `serve` on the CPU (ServeOnBackends)
#     bench.txt      copy bandwidth (the roofline), GEMV / MoE GEMM bandwidth and
#                    its fraction of the copy's, prefill GEMM (bench_backend), for
#                    the medium synthetic MoE's, GLM-4.5-Air's and DeepSeek-V3's shapes
#     nccl.txt       --tp 1 --comm nccl (the NCCL device communicator, one rank) vs
#                    --tp 1 without it: the self-check line and the same greedy ids
#     decode.txt     the medium synthetic GLM-4.5 MoE (bf16 and MXFP4): greedy tokens
#                    on the GPU (with and without --gpu-graphs) vs the CPU backend,
#                    decode tok/s and GB/s with and without graphs
#     air.txt        GLM-4.5-Air's shape with dummy weights (configs/glm-4.5-air,
#                    --load-format dummy): MXFP4 (all 46 layers + MTP) and bf16 (16
#                    layers, to fit one GPU): decode tok/s (eager, graphs), then `mxserve serve
#                    --backend cuda` under `mxserve bench` aa-single and
#                    prefill-heavy (scaled down to fit the time)
#     summary.txt    the lines that matter from all of the above
#   tools/gpu-check.sh host      on the same machine, its own CPU (issue 20: the AMX
#                                kernels have never run on an AMX CPU, and a GPU host is
#                                often an Intel Xeon that has AMX): writes host.txt to $OUT
#     the CPU (lscpu, its AVX-512 / AMX flags); the CPU kernel tests on it (MatmulAmx.*
#     compares the tile registers with the emulated tiles bit for bit where AMX is
#     offered); bench_decode's prefill and decode of the medium bf16 Qwen3 with AMX on
#     (the default) and off (MXSERVE_AMX=0), alternating, at 2 threads and at every
#     logical CPU (nproc --all); `mxserve tune` of MXFP4 on the ISA the engine chose, for
#     this machine's cpu key (tuned-host.json)
# Device-tool calls: run(command="tools/gpu-check.sh run", carry=["gpu-check"], timeout_s=540),
# then, if time is left, run(command="tools/gpu-check.sh host", carry=["gpu-check"], timeout_s=300).
# MXSERVE_GPU_BACKEND=cpu runs the same steps on the CPU backend with the small
# preset (a dry run of this script on a machine without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=gpu-check
BACKEND=${MXSERVE_GPU_BACKEND:-cuda}

prepare() {
  local archs=${MXSERVE_GPU_ARCHS:-90}
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMXSERVE_CUDA=ON -DMXSERVE_HIP=OFF \
    -DMXSERVE_CUDA_ARCHS="$archs" -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON >/dev/null
  cmake --build build-gpu -j"$(nproc)" --target mxserve mxserve_tests bench_backend bench_decode
  rm -rf "$DIR" && mkdir -p "$DIR/bin" "$DIR/lib"
  for b in mxserve mxserve_tests bench_backend bench_decode; do
    strip -o "$DIR/bin/$b" "build-gpu/$b"
  done
  # Shared libraries beyond the C/C++ runtime: a bare machine has none of them.
  ldd "$DIR"/bin/* | awk '/=> \// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$DIR/lib/"; done
  git rev-parse --short HEAD >"$DIR/commit"
  du -sh "$DIR"
  local kib
  kib=$(du -sk "$DIR" | cut -f1)
  [ "$kib" -lt $((60 * 1024)) ] || echo "warning: $DIR is $((kib / 1024)) MiB; a device call carries at most 64 MiB"
  echo "prepared $DIR/ at $(cat "$DIR/commit"): carry it to the GPU machine and run tools/gpu-check.sh run"
}

# Both checks run binaries prepare made (the ones named), from $DIR, and write to $OUT:
# sets out and bin (declared local by the caller).
setup() {
  out=${OUT:-$DIR/out}
  bin=$DIR/bin
  mkdir -p "$out"
  export LD_LIBRARY_PATH="$PWD/$DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local b
  for b in "$@"; do
    [ -x "$bin/$b" ] || { echo "no $bin/$b: run tools/gpu-check.sh prepare first (and carry $DIR)"; exit 1; }
  done
}

run() {
  local out bin
  setup mxserve mxserve_tests bench_backend
  local preset=medium shape_list="medium air dsv3" min_ms=300 ntok=256
  # GLM-4.5-Air with dummy weights: layers per format (bf16's 46 layers would not fit one GPU), bench scale.
  local air_mx='{}' air_bf='{"num_hidden_layers": 16}' scale=0.05 kv_blocks=4096
  if [ "$BACKEND" = cpu ]; then
    preset=small shape_list=medium min_ms=20 ntok=16
    air_mx='{"num_hidden_layers": 2}' air_bf='{"num_hidden_layers": 1}' scale=0.005 kv_blocks=256
  fi
  local models=/tmp/mxserve-gpu-check
  echo "gpu-check at $(cat $DIR/commit 2>/dev/null), backend $BACKEND, $(date -u +%FT%TZ)" | tee "$out/summary.txt"

  { nvidia-smi 2>&1 || rocm-smi 2>&1 || echo "no GPU tool"; } >"$out/device.txt"
  grep -m2 -E "H200|H100|MI3|Driver Version" "$out/device.txt" | tee -a "$out/summary.txt" || true

  # 1. Every op, and whole models, against the CPU backend.
  "$bin/mxserve_tests" --gtest_filter='Backend.*:GpuBackend.*:*ModelOnBackends*:DummyLoad.*:KvCacheDtype.*:ServeOnBackends.*' 2>&1 |
    grep -v "no tuned kernel config" >"$out/tests.txt" || true
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[ gpu      \] (cuda|hip)" "$out/tests.txt" | sort -u | tee -a "$out/summary.txt"

  # 2. Bandwidth against the copy roofline.
  : >"$out/bench.txt"
  for shape in $shape_list; do
    "$bin/bench_backend" --backend "$BACKEND" --shape "$shape" --min-ms "$min_ms" 2>&1 |
      grep -v "no tuned kernel config" >>"$out/bench.txt" || echo "bench_backend --shape $shape failed" >>"$out/bench.txt"
  done
  cat "$out/bench.txt" >>"$out/summary.txt"

  # 3. The medium synthetic MoE end to end: GPU tokens vs the CPU engine's, and speed.
  rm -rf "$models" && mkdir -p "$models"
  {
    "$bin/mxserve" make-test-model --arch glm4_moe --preset "$preset" --out "$models/bf16"
    "$bin/mxserve" quantize --model "$models/bf16" --out "$models/mxfp4" --format mxfp4 | tail -2
    local prompt
    prompt=$(seq -s ' ' 1 64)
    for fmt in bf16 mxfp4; do
      local m=$models/$fmt
      echo "== $fmt: CPU backend, 32 greedy tokens"
      "$bin/mxserve" generate --model "$m" --prompt-ids "$prompt" --max-tokens 32 --temperature 0 2>&1
      echo "== $fmt: --backend $BACKEND, 32 greedy tokens"
      "$bin/mxserve" generate --model "$m" --prompt-ids "$prompt" --max-tokens 32 --temperature 0 --backend "$BACKEND" 2>&1
      echo "== $fmt: --backend $BACKEND --gpu-graphs, 32 greedy tokens"
      "$bin/mxserve" generate --model "$m" --prompt-ids "$prompt" --max-tokens 32 --temperature 0 --backend "$BACKEND" \
        --gpu-graphs 2>&1
      for g in "" --gpu-graphs; do
        echo "== $fmt: --backend $BACKEND $g, $ntok tokens (decode speed)"
        "$bin/mxserve" generate --model "$m" --prompt-ids "$prompt" --max-tokens "$ntok" --temperature 0 --ignore-eos \
          --backend "$BACKEND" $g 2>&1 | grep -v "^[0-9]"
      done
    done
  } >"$out/decode.txt" 2>&1 || echo "decode step failed (see decode.txt)" | tee -a "$out/summary.txt"
  # Tokens: the first line of ids after each "32 greedy tokens" header.
  awk '/32 greedy tokens/ {h=$0; getline; while ($0 !~ /^[0-9]/ && (getline) > 0) {} ; print h ": " substr($0, 1, 80)}' \
    "$out/decode.txt" | tee -a "$out/summary.txt"
  grep -E "^== |generated .* tok/s|GB/s of weights" "$out/decode.txt" | tee -a "$out/summary.txt" || true

  # 3b. The NCCL device communicator on one GPU (issue 23): --tp 1 --comm nccl
  # must open libnccl.so.2, pass its self-check and give the ids of the run
  # without it. libnccl (~250 MB) is not carried: it runs where the machine has it.
  if [ "$BACKEND" = cuda ]; then
    {
      local ids="$(seq -s ' ' 1 16)" m=$models/bf16
      echo "== nccl: --backend cuda --tp 1 (host-staged), 16 greedy tokens"
      "$bin/mxserve" generate --model "$m" --prompt-ids "$ids" --max-tokens 16 --temperature 0 --backend cuda \
        --tp 1 --print-ids 2>&1 | grep -v "no tuned kernel config"
      echo "== nccl: --backend cuda --tp 1 --comm nccl, 16 greedy tokens"
      "$bin/mxserve" generate --model "$m" --prompt-ids "$ids" --max-tokens 16 --temperature 0 --backend cuda \
        --tp 1 --comm nccl --print-ids 2>&1 | grep -v "no tuned kernel config"
    } >"$out/nccl.txt" 2>&1 || echo "nccl step failed (see nccl.txt)" | tee -a "$out/summary.txt"
    grep -E "^== |device communicator|^[0-9]|rror" "$out/nccl.txt" | tee -a "$out/summary.txt" || true
  fi
  rm -rf "$models"

  # 4. GLM-4.5-Air's shape, weights made on the device: decode speed, then the
  # server under both Artificial Analysis workloads (scaled down).
  {
    local cfg=configs/glm-4.5-air
    for fmt in mxfp4 bf16; do
      local ov=$air_mx
      [ $fmt = bf16 ] && ov=$air_bf
      local load=(--model "$cfg" --load-format dummy --dummy-dtype "$fmt" --hf-overrides "$ov" --backend "$BACKEND")
      for g in "" --gpu-graphs; do
        echo "== air $fmt ($ov): --backend $BACKEND $g, $ntok tokens (decode speed)"
        timeout 180 "$bin/mxserve" generate "${load[@]}" --prompt-ids "$(seq -s ' ' 1 64)" --max-tokens "$ntok" \
          --temperature 0 --ignore-eos $g 2>&1 | grep -v "no tuned kernel config" | grep -v "^[0-9]" || echo "(failed)"
      done
      for w in aa-single prefill-heavy; do
        echo "== air $fmt: mxserve serve --backend $BACKEND under mxserve bench --workload $w --scale $scale"
        timeout 240 "$bin/mxserve" bench --launch-server "${load[@]}" --workload "$w" --scale "$scale" \
          --requests 8 --serve-arg=--kv-blocks="$kv_blocks" --no-progress --out "$out/air-$fmt-$w" 2>&1 |
          grep -v "no tuned kernel config" | tail -12 || echo "(failed)"
      done
    done
  } >"$out/air.txt" 2>&1 || echo "air step failed (see air.txt)" | tee -a "$out/summary.txt"
  grep -E "^== |generated .* tok/s|tok/s, |TTFT|failed" "$out/air.txt" | tee -a "$out/summary.txt" || true
}

# The lent machine's CPU (see the top of this file). Every step is bounded (about 4
# minutes in all, most of it the bench), and a failed one is written down rather than
# stopping the rest; output is line-buffered, so what ran is in host.txt if the call is cut.
host() {
  local out bin
  setup mxserve mxserve_tests bench_decode
  local tmp=/tmp/mxserve-host-check
  local model=$tmp/qwen3-medium-bf16 rounds=3 prompt=512 tokens=16
  [ "$BACKEND" = cpu ] && rounds=1 prompt=64 tokens=4  # the dry run: one round, short
  {
    echo "host check at $(cat "$DIR/commit" 2>/dev/null), $(date -u +%FT%TZ)"
    echo "== cpu"
    lscpu | grep -E "^Model name|^CPU\(s\)|^Thread|^Core|^Socket|^L2|^L3" || true
    echo "flags: $(grep -o -w -E 'avx512[a-z_0-9]*|amx[a-z_0-9]*|avx_vnni' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    echo "== the CPU kernel tests on this CPU"
    mkdir -p "$tmp"
    local log=$tmp/tests.txt rc=0
    timeout 120 "$bin/mxserve_tests" \
      --gtest_filter='Matmul*:CpuAttention.*:Ops.*:Registry.*:KernelConfigs.*:Families/Bf16Activations.*' >"$log" 2>&1 ||
      rc=$?
    grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]+ test|^\[ +(OK|FAILED|SKIPPED) +\] MatmulAmx|no AMX" "$log" |
      awk '!seen[$0]++' || true
    [ "$rc" = 0 ] || echo "(mxserve_tests exited $rc: a test failed (above), or 124: it ran out of time)"
    grep -B2 -A12 -E "^\[  FAILED  \] MatmulAmx" "$log" | head -60 || true
    echo "== bf16 Qwen3 medium: prefill $prompt tokens, decode $tokens; AMX on (default) and off (MXSERVE_AMX=0)"
    # bench_decode writes the synthetic model on first use; this first call pays for it.
    # Its model line names the ISA the engine chose (best_isa()), which the tune below takes.
    local first isa
    first=$(timeout 120 "$bin/bench_decode" "$model" --prompt 8 --tokens 2 2>&1) || echo "(the first bench_decode call failed)"
    isa=$(sed -n 's/^model: .*, isa \([a-z0-9]*\),.*/\1/p' <<<"$first")
    local threads r amx
    for threads in $(printf '%s\n' 2 "$(nproc --all)" | sort -un); do
      for r in $(seq "$rounds"); do
        for amx in 1 0; do
          echo "-- threads $threads, round $r, MXSERVE_AMX=$amx"
          MXSERVE_THREADS=$threads MXSERVE_AMX=$amx timeout 120 "$bin/bench_decode" "$model" --prompt "$prompt" \
            --tokens "$tokens" 2>&1 | grep --line-buffered -E "^(model|amx|prefill|decode):" || echo "(failed)"
        done
      done
    done
    local isas=()  # the engine's ISA; unknown (the first call failed): tune's default, every ISA
    [ -n "$isa" ] && isas=(--isas "$isa")
    echo "== mxserve tune of MXFP4 on ${isa:-every ISA} for this machine's cpu key (2 threads): $out/tuned-host.json"
    timeout 150 "$bin/mxserve" tune --synthetic --dtypes MXFP4 "${isas[@]}" --threads 2 --out "$out/tuned-host.json" \
      --replace 2>&1 | grep --line-buffered -E "^tune: (CPU|wrote)" || echo "(tune failed or ran out of time)"
  } 2>&1 | tee "$out/host.txt"
  rm -rf "$tmp"
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  host) host ;;
  *) echo "usage: tools/gpu-check.sh prepare|run|host (see the top of this file)"; exit 2 ;;
esac
