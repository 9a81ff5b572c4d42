#!/usr/bin/env python3
"""Load on a running minfer-server: N concurrent streaming clients x M requests each.
    server-load.py --port PORT [--host 127.0.0.1] [-n CLIENTS] [-m REQUESTS] [--prompt-tokens P]
                   [--max-tokens T] [--vocab V] [--timeout S]
Each request is a /v1/completions stream of a random token-id prompt (P ids below V) asking
for T tokens at temperature 0. Prints aggregate generated tok/s, time to first token and
time per output token (p50/p99), and errors; a response counts as an error unless it ends
with [DONE] and its usage says P prompt tokens and T completion tokens (fewer only when it
finished "stop": the model ended it). Exits 1 on any error.
Every request is bounded by --timeout; the run by their count."""
import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("--host", default="127.0.0.1")
ap.add_argument("--port", type=int, required=True)
ap.add_argument("-n", "--clients", type=int, default=8)
ap.add_argument("-m", "--requests", type=int, default=2)
ap.add_argument("--prompt-tokens", type=int, default=128)
ap.add_argument("--max-tokens", type=int, default=64)
ap.add_argument("--vocab", type=int, default=500)
ap.add_argument("--timeout", type=float, default=300)
a = ap.parse_args()

lock = threading.Lock()
ttft, tpot, errors, generated = [], [], [], [0]


def one(rng):
    prompt = [rng.randrange(1, a.vocab) for _ in range(a.prompt_tokens)]
    body = {"prompt": prompt, "max_tokens": a.max_tokens, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    c = http.client.HTTPConnection(a.host, a.port, timeout=a.timeout)
    try:
        t0 = time.perf_counter()
        c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return f"HTTP {r.status}: {r.read()[:200]!r}"
        first = None
        usage = None
        finish = None
        done = False
        while True:
            line = r.readline()
            if not line:
                break
            if not line.startswith(b"data: "):
                continue
            payload = line[6:].strip()
            if payload == b"[DONE]":
                done = True
                break
            j = json.loads(payload)
            if j.get("choices") and j["choices"][0].get("text") and first is None:
                first = time.perf_counter()
            if j.get("choices") and j["choices"][0].get("finish_reason"):
                finish = j["choices"][0]["finish_reason"]
            if "usage" in j:
                usage = j["usage"]
        t1 = time.perf_counter()
        complete = usage and (usage["completion_tokens"] == a.max_tokens if finish == "length" else
                              finish == "stop" and 0 < usage["completion_tokens"] <= a.max_tokens)
        if not done or not complete or usage["prompt_tokens"] != a.prompt_tokens:
            return f"incomplete: done={done} finish={finish} usage={usage}"
        with lock:
            ttft.append((first or t1) - t0)
            if usage["completion_tokens"] > 1 and first:
                tpot.append((t1 - first) / (usage["completion_tokens"] - 1))
            generated[0] += usage["completion_tokens"]
        return None
    except Exception as e:  # a timeout or a dropped connection: an error, counted
        return f"{type(e).__name__}: {e}"
    finally:
        c.close()


def client(i):
    rng = random.Random(i)
    for _ in range(a.requests):
        err = one(rng)
        if err:
            with lock:
                errors.append(err)


start = time.perf_counter()
threads = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
for t in threads:
    t.start()
for t in threads:
    t.join(a.timeout * a.requests + 10)
wall = time.perf_counter() - start


def pct(xs, q):
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


print(f"{a.clients} clients x {a.requests} requests, {a.prompt_tokens}-token prompts, {a.max_tokens} tokens each: "
      f"{generated[0]} tokens in {wall:.2f} s = {generated[0] / wall:.1f} tok/s generated")
print(f"time to first token p50 {pct(ttft, 0.5) * 1000:.1f} ms, p99 {pct(ttft, 0.99) * 1000:.1f} ms; "
      f"time per output token p50 {pct(tpot, 0.5) * 1000:.2f} ms, p99 {pct(tpot, 0.99) * 1000:.2f} ms; errors {len(errors)}")
for e in errors[:5]:
    print("  error:", e)
sys.exit(1 if errors else 0)
