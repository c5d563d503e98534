#!/usr/bin/python3
"""Planner calibration on this CPU: runs `mxserve bench --in-process` and
`mxserve plan --hardware cpu` for the same model and workloads and prints
predicted vs measured figures with the relative error, as a Markdown table.
Prints figures, decides nothing. Timings on a shared 2-core machine are noisy:
run it in a quiet window and repeat (--repeat) to see the spread.

usage: plan_calibration.py MODEL [--mxserve build/mxserve] [--threads 2] [--repeat 1]
Workloads: aa-single at --scale 0.05 (500 in / 75 out, one stream) and
prefill-heavy at --scale 0.025 (500 in, 60% shared, 25 out) at concurrency 1 and 4.
"""
import argparse
import json
import os
import subprocess
import tempfile


def run(cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def plan(a, workload, scale, concurrency, out):
    run([a.mxserve, "plan", "--model", a.model, "--hardware", "cpu", "--workload", workload, "--scale", str(scale),
         "--concurrency", str(concurrency), "--prefill-chunk", "256", "--json", out])
    return json.load(open(out))["layouts"][0]


def bench(a, workload, scale, concurrency, outdir):
    cmd = [a.mxserve, "bench", "--in-process", "--model", a.model, "--workload", workload, "--scale", str(scale),
           "--threads", str(a.threads), "--no-progress", "--out", outdir]
    if concurrency:
        cmd += ["--concurrency", concurrency]
    run(cmd)
    return json.load(open(os.path.join(outdir, workload + ".json")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--mxserve", default="build/mxserve")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        p_aa = plan(a, "aa-single", 0.05, 1, os.path.join(d, "p1.json"))
        p_ph = {c: plan(a, "prefill-heavy", 0.025, c, os.path.join(d, f"p{c}.json")) for c in (1, 4)}
        for r in range(a.repeat):
            aa = bench(a, "aa-single", 0.05, None, d)
            pt = aa["points"][0]
            uncached = pt["prompt_tokens"] / pt["requests_ok"]
            rows.append(("aa-single 500/75, c=1", "prefill tok/s (input / TTFT p50)", p_aa["prefill_tok_s"],
                         uncached / (pt["ttft_ms"]["p50"] / 1e3)))
            rows.append(("aa-single 500/75, c=1", "decode tok/s (1 / mean TPOT)", p_aa["per_user_tok_s"],
                         pt["per_user_tok_s"]))
            ph = bench(a, "prefill-heavy", 0.025, "1,4", d)
            for pt in ph["points"]:
                c = pt["concurrency"]
                rows.append((f"prefill-heavy 500/25 60% shared, c={c}", "total tok/s", p_ph[c]["total_tok_s_node"],
                             pt["total_tok_s"]))
                rows.append((f"prefill-heavy 500/25 60% shared, c={c}", "output tok/s", p_ph[c]["output_tok_s_node"],
                             pt["output_tok_s"]))
    print(f"model {a.model}, {a.threads} threads, {a.repeat} run(s)\n")
    print("| workload | figure | predicted | measured | error |")
    print("|---|---|---|---|---|")
    for w, f, p, m in rows:
        print(f"| {w} | {f} | {p:.1f} | {m:.1f} | {100 * (p - m) / m:+.0f}% |")


if __name__ == "__main__":
    main()
