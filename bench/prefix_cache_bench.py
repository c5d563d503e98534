#!/usr/bin/python3
"""Prefix-cache benchmark against a running OpenAI-compatible server: requests
whose prompts share a fixed fraction of their tokens (the seed's prefill-heavy
workload, scaled to the model's context), sent at fixed concurrency. Prints
throughput and TTFT percentiles; run it once against a server with the prefix
cache and once with --no-prefix-cache. Prints figures, decides nothing.

usage: prefix_cache_bench.py URL MODEL [--requests N] [--prompt-len L] [--shared F]
                             [--max-tokens T] [--concurrency C] [--vocab V]
Token-id prompts, so it works with models that have no tokenizer.
"""
import argparse
import http.client
import json
import random
import statistics
import threading
import time
import urllib.parse


def one_request(url, model, prompt, max_tokens):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise SystemExit(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    ttft, usage, n = None, None, 0
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("choices"):
            n += 1
            if ttft is None:
                ttft = time.perf_counter() - t0
        if chunk.get("usage"):
            usage = chunk["usage"]
    return ttft, time.perf_counter() - t0, usage


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=400)
    ap.add_argument("--shared", type=float, default=0.6)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--groups", type=int, default=1,
                    help="distinct shared prefixes (e.g. system prompts), picked at random per request")
    a = ap.parse_args()
    rng = random.Random(0)
    n_shared = int(a.prompt_len * a.shared)
    groups = [[1] + [rng.randrange(3, a.vocab) for _ in range(n_shared - 1)] for _ in range(a.groups)]
    prompts = []
    for _ in range(a.requests):
        shared = groups[rng.randrange(a.groups)]
        prompts.append(shared + [rng.randrange(3, a.vocab) for _ in range(a.prompt_len - len(shared))])
    results, lock, it = [], threading.Lock(), iter(prompts)

    def worker():
        while True:
            with lock:
                p = next(it, None)
            if p is None:
                return
            r = one_request(a.url, a.model, p, a.max_tokens)
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(a.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ttfts = sorted(r[0] for r in results)
    prompt_tokens = sum(r[2]["prompt_tokens"] for r in results)
    cached = sum(r[2].get("prompt_tokens_details", {}).get("cached_tokens", 0) for r in results)
    gen = sum(r[2]["completion_tokens"] for r in results)
    q = lambda p: ttfts[min(len(ttfts) - 1, int(p * len(ttfts)))]
    print(json.dumps({
        "requests": len(results), "concurrency": a.concurrency, "prompt_len": a.prompt_len, "shared": a.shared,
        "wall_s": round(wall, 3), "requests_per_s": round(len(results) / wall, 2),
        "total_tok_per_s": round((prompt_tokens + gen) / wall, 1), "output_tok_per_s": round(gen / wall, 1),
        "cache_hit_rate": round(cached / max(prompt_tokens, 1), 3),
        "ttft_ms": {"p50": round(1000 * q(0.5), 1), "p90": round(1000 * q(0.9), 1), "p99": round(1000 * q(0.99), 1),
                    "mean": round(1000 * statistics.mean(ttfts), 1)}}, indent=1))


if __name__ == "__main__":
    main()
