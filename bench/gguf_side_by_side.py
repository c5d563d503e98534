#!/usr/bin/env python3
"""Side by side with llama.cpp on the same GGUF files (not in CI; builds nothing).

Runs our build/bench_decode and an external llama.cpp's llama-bench (its path is
the first argument; nothing of llama.cpp lives in this repo) alternately, engine
by engine, round by round, at each thread count, so both see the same machine
load; then prints one markdown table row per (model, threads) with medians and
min-max of prefill and decode tok/s, the mxserve / llama.cpp ratios, the CPU
model and the STREAM-like read bandwidth at each thread count (bench_kernels), plain
and with software prefetch.

Decode is timed after the prompt in both engines: bench_decode generates after
prefilling it, and llama-bench's tg test gets `-d PROMPT` (its depth: that many
tokens already in the KV cache), so both attend to the same context. --decode-depth 0
gives llama.cpp's default, decode over an empty cache (the tables before
2026-12-06 were made so; at 256 tokens of prompt it moves llama.cpp's decode by a
few percent, at 4096 by 2-4x).

  bench/gguf_side_by_side.py LLAMA_BENCH MODEL.gguf... [--rounds 3] [--threads 1,2]
                             [--prompt 256] [--tokens 64] [--decode-depth prompt|0]
                             [--llama-args "-fa 1"]

--llama-args adds llama-bench options to both of its runs (e.g. "-fa 1", flash
attention, which its decode at depth depends on); the header prints them. `-d`
needs a llama-bench from 2025 or later.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")


def run(cmd, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def mxserve(model, threads, prompt, tokens):
    out = run([os.path.join(BUILD, "bench_decode"), model, "--prompt", str(prompt), "--tokens", str(tokens)],
              {"MXSERVE_THREADS": str(threads)})
    pre = re.search(r"^prefill: .*= ([0-9.]+) tok/s", out, re.M)
    dec = re.search(r"^decode: .*= ([0-9.]+) tok/s", out, re.M)
    if not (pre and dec):
        sys.exit(f"bench_decode printed no figures:\n{out}")
    return float(pre.group(1)), float(dec.group(1))


def llama(bench, model, threads, prompt, tokens, depth, extra):
    """Prefill of `prompt` tokens over an empty cache; decode of `tokens` after `depth` cached ones."""
    def rows(args):
        out = run([bench, "-m", model, "-t", str(threads), "-r", "1", "-o", "json"] + extra + args,
                  {"OMP_WAIT_POLICY": "passive"})
        return out, json.loads(out)
    pre = dec = None
    out, pp = rows(["-p", str(prompt), "-n", "0"])
    for row in pp:
        if row.get("n_prompt", 0) > 0 and row.get("n_gen", 0) == 0:
            pre = float(row["avg_ts"])
    out2, tg = rows(["-p", "0", "-n", str(tokens)] + (["-d", str(depth)] if depth else []))
    for row in tg:
        if row.get("n_gen", 0) > 0 and row.get("n_prompt", 0) == 0 and row.get("n_depth", 0) == depth:
            dec = float(row["avg_ts"])
    if pre is None or dec is None:
        sys.exit(f"llama-bench printed no pp/tg rows:\n{out}\n{out2}")
    return pre, dec


def stream_read(threads):
    """GB/s of the plain read and of the read with software prefetch (bench_kernels)."""
    out = run([os.path.join(BUILD, "bench_kernels"), "--benchmark_filter=^BM_StreamRead(Prefetch)?/",
               "--benchmark_format=json"], {"MXSERVE_THREADS": str(threads)})
    gbs = {b["name"].split("/")[0]: float(b["GB/s"]) for b in json.loads(out)["benchmarks"]}
    return gbs["BM_StreamRead"], gbs["BM_StreamReadPrefetch"]


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"^Model name:\s*(.+)$", out, re.M)
        return m.group(1).strip() if m else "unknown"
    except OSError:
        return "unknown"


def fmt(xs):
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("llama_bench")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--decode-depth", default="prompt", choices=["prompt", "0"],
                    help="llama.cpp's decode after the prompt (as ours) or over an empty cache")
    ap.add_argument("--llama-args", default="", help="extra llama-bench options, e.g. \"-fa 1\"")
    a = ap.parse_args()
    if a.rounds < 1 or a.prompt < 1 or a.tokens < 2:
        sys.exit("--rounds >= 1, --prompt >= 1 and --tokens >= 2")
    depth = a.prompt if a.decode_depth == "prompt" else 0
    extra = a.llama_args.split()
    threads = [int(t) for t in a.threads.split(",") if t]
    print(f"CPU: {cpu_model()}")
    for t in threads:
        plain, prefetched = stream_read(t)
        print(f"STREAM-like read, {t} thread(s): {plain:.1f} GB/s, {prefetched:.1f} with software prefetch")
    print(f"prompt {a.prompt}, tokens {a.tokens}, llama.cpp decode at depth {depth}, llama-bench options "
          f"{' '.join(extra) or '(none)'}, {a.rounds} rounds, engines alternating; medians (min-max)\n")
    print("| model | T | mxserve prefill / decode tok/s | llama.cpp prefill / decode | ratio prefill / decode |")
    print("|---|---|---|---|---|")
    for model in a.models:
        for t in threads:
            mp, md, lp, ld = [], [], [], []
            for _ in range(a.rounds):
                p, d = mxserve(model, t, a.prompt, a.tokens)
                mp.append(p), md.append(d)
                p, d = llama(a.llama_bench, model, t, a.prompt, a.tokens, depth, extra)
                lp.append(p), ld.append(d)
            rp = statistics.median(mp) / statistics.median(lp)
            rd = statistics.median(md) / statistics.median(ld)
            print(f"| {os.path.basename(model)} | {t} | {fmt(mp)} / {fmt(md)} | {fmt(lp)} / {fmt(ld)} | "
                  f"{rp:.2f} / {rd:.2f} |", flush=True)


if __name__ == "__main__":
    main()
