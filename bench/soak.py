#!/usr/bin/env python3
"""Soak test of one `mxserve serve` (not in CI; prints figures, decides nothing
on timings): N requests of mixed lengths (prompt 1..P token ids, max_tokens
1..G, a quarter streamed, some with stop ids, some with a shared prefix) from C
concurrent clients. Reports errors, throughput, the server's RSS over the run
(/proc/PID/status) and, after it drains, the KV blocks and queue gauges from
/metrics: after the drain nothing may be running or waiting and every used KV
block must be an (evictable) prefix-cache block.

  bench/soak.py --mxserve build/mxserve --model ../shared/models/stories260K/stories260K.bin \
      --requests 10000 --concurrency 16

Exit status 1 if any request failed or the drained server still holds KV
blocks outside the prefix cache (the figures are the point; the check guards them).
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
import http.client


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def one_request(conn, rng, args, shared_prefix):
    plen = rng.randint(1, args.max_prompt)
    prompt = [1] + [rng.randint(3, 500) for _ in range(plen - 1)]
    if rng.random() < 0.25:  # shared prefix: exercises the prefix cache and its eviction
        prompt = shared_prefix + prompt[1:]
    gen = rng.randint(1, args.max_gen)
    stream = rng.random() < 0.25
    body = {"prompt": prompt[: args.context - gen], "max_tokens": gen, "ignore_eos": True,
            "temperature": rng.choice([0, 0.8]), "seed": rng.randint(0, 1 << 30), "stream": stream}
    if rng.random() < 0.1:
        body["stop_token_ids"] = [rng.randint(3, 500)]
        body["ignore_eos"] = False
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read().decode()
    if r.status != 200:
        return f"HTTP {r.status}: {data[:200]}"
    if stream:
        events = [e for e in data.split("\n\n") if e]
        if not events or events[-1] != "data: [DONE]":
            return "stream without [DONE]"
        n = sum(len(json.loads(e[6:])["choices"][0]["token_ids"]) for e in events[:-1] if e.startswith("data: {"))
        finish = [json.loads(e[6:])["choices"][0]["finish_reason"] for e in events[:-1] if e.startswith("data: {")][-1]
    else:
        j = json.loads(data)
        n = len(j["choices"][0]["token_ids"])
        finish = j["choices"][0]["finish_reason"]
    if body["ignore_eos"] and (n != gen or finish != "length"):
        return f"{n} tokens / {finish}, wanted {gen} / length"
    if not body["ignore_eos"] and (n < 1 or n > gen):
        return f"{n} tokens for max_tokens {gen}"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mxserve", default="build/mxserve")
    ap.add_argument("--model", default="../shared/models/stories260K/stories260K.bin")
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-prompt", type=int, default=200)
    ap.add_argument("--max-gen", type=int, default=96)
    ap.add_argument("--context", type=int, default=512, help="the model's context (stories260K: 512)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    log = open("/tmp/mxserve-soak.log", "w+")
    srv = subprocess.Popen([args.mxserve, "serve", "--model", args.model, "--port", "0", "--threads", str(args.threads),
                            "--max-running", "16", "--max-queue", str(4 * args.concurrency)],
                           stderr=log, stdout=subprocess.DEVNULL)
    port = None
    for _ in range(500):
        time.sleep(0.02)
        log.seek(0)
        m = re.search(r"http://127\.0\.0\.1:(\d+) \(", log.read())
        if m:
            port = int(m.group(1))
            break
    if not port:
        srv.kill()
        sys.exit("server did not start; see /tmp/mxserve-soak.log")

    rng0 = random.Random(args.seed)
    shared_prefix = [1] + [rng0.randint(3, 500) for _ in range(63)]
    lock = threading.Lock()
    done = [0]
    errors = []
    rss_samples = []  # (requests done, RSS KiB)
    next_id = [0]

    def client(k):
        rng = random.Random(args.seed * 1000 + k)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        while True:
            with lock:
                if next_id[0] >= args.requests:
                    break
                next_id[0] += 1
            try:
                err = one_request(conn, rng, args, shared_prefix)
            except Exception as e:  # noqa: BLE001 - any failure is an error to report
                err = f"{type(e).__name__}: {e}"
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            with lock:
                done[0] += 1
                if err:
                    errors.append(err)
                if done[0] % 500 == 0:
                    rss_samples.append((done[0], status_kib(srv.pid, "VmRSS")))
        conn.close()

    rss_start = status_kib(srv.pid, "VmRSS")
    t0 = time.time()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    time.sleep(0.5)  # the engine publishes its gauges at the end of its last step
    m = metrics(port)
    rss_end = status_kib(srv.pid, "VmRSS")
    hwm = status_kib(srv.pid, "VmHWM")
    srv.terminate()
    rc = srv.wait(timeout=60)

    used = m.get('mxserve_kv_blocks{state="used"}', -1)
    cached = m.get('mxserve_kv_blocks{state="cached"}', -1)
    total = m.get('mxserve_kv_blocks{state="total"}', -1)
    free = m.get('mxserve_kv_blocks{state="free"}', -1)
    gen_tokens = m.get("mxserve_generation_tokens_total", 0)
    first_half = [r for n, r in rss_samples if n <= args.requests // 2]
    second_half = [r for n, r in rss_samples if n > args.requests // 2]
    print(f"requests: {done[0]}, errors: {len(errors)}, wall {wall:.1f} s, {done[0] / wall:.1f} req/s, "
          f"{gen_tokens / wall:.0f} generated tok/s (noisy: shared machine)")
    print(f"RSS: start {rss_start / 1024:.1f} MiB, end {rss_end / 1024:.1f} MiB, peak {hwm / 1024:.1f} MiB; "
          f"max over first half {max(first_half, default=0) / 1024:.1f} MiB, "
          f"over second half {max(second_half, default=0) / 1024:.1f} MiB")
    print(f"after drain: running {m.get('mxserve_requests_running')}, waiting {m.get('mxserve_requests_waiting')}, "
          f"KV blocks total {total:.0f} used {used:.0f} cached {cached:.0f} free {free:.0f}; "
          f"preemptions {m.get('mxserve_preemptions_total', 0):.0f}; server exit status {rc}")
    print("RSS every 1000 requests (MiB): " +
          " ".join(f"{r / 1024:.1f}" for n, r in rss_samples if n % 1000 == 0))
    for e in errors[:10]:
        print("error:", e)
    ok = not errors and used == cached and m.get("mxserve_requests_running") == 0 and rc == 0
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
