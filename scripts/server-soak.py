#!/usr/bin/env python3
"""A soak of minfer-server: it starts one (127.0.0.1, a free port), then for --minutes runs a
few clients sending random prompts (completions and chat, streamed or not, random lengths and
sampling), some of which hang up mid-stream, with the malformed corpus of tests/server_corpus.py
mixed in. Every request is bounded by --timeout. At the end it checks that the server is up,
that every accepted request was answered in full or cancelled by its client's hang-up (none lost
or hung), that no sequence, queue entry or KV page is held, and prints the server's RSS over the
run (start after warm-up, every few minutes, end).
    server-soak.py SERVER CONFIG MODEL [--minutes 30] [--clients 4] [-np 4] [--timeout 120]
Exits 1 when a check fails. Run from the repository root."""
import argparse
import http.client
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from server_corpus import cases, send  # noqa: E402
from server_harness import Server, metric  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("server")
ap.add_argument("config")
ap.add_argument("model")
ap.add_argument("--minutes", type=float, default=30)
ap.add_argument("--clients", type=int, default=4)
ap.add_argument("-np", type=int, default=4)
ap.add_argument("--timeout", type=float, default=120)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--corpus", type=float, default=0.15, help="share of requests from the malformed corpus")
ap.add_argument("--rss-every", type=float, default=300, help="seconds between RSS readings")
a = ap.parse_args()

words = ("the a little cat dog sun went ran happy big small tree house play day friend said "
         "once upon time there was girl boy park ball red blue water sky").split()
lock = threading.Lock()
tally = {"done": 0, "stop": 0, "length": 0, "hung_up": 0, "bad_ok": 0, "errors": []}


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def one(s, rng, chat_ok):
    chat = chat_ok and rng.random() < 0.4
    text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 300)))
    body = {"max_tokens": rng.randint(1, 200), "temperature": rng.choice([0, 0.7, 1.2]), "seed": rng.randrange(1 << 30),
            "top_k": rng.choice([0, 40]), "stream": rng.random() < 0.7}
    if rng.random() < 0.2:
        body["logprobs"] = True if chat else 2
        if chat:
            body["top_logprobs"] = 2
    if rng.random() < 0.2:
        body["stop"] = [rng.choice(words)]
    if chat:
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    hang_up = body["stream"] and rng.random() < 0.25
    path = "/v1/chat/completions" if chat else "/v1/completions"
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=a.timeout)
    try:
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return f"{path}: HTTP {r.status} {r.read()[:200]!r}"
        if not body["stream"]:
            j = json.loads(r.read())
            fin = j["choices"][0]["finish_reason"]
            u = j["usage"]
            if fin not in ("stop", "length") or u["completion_tokens"] > body["max_tokens"] or (fin == "length" and u["completion_tokens"] != body["max_tokens"]):
                return f"{path}: finish {fin} usage {u} for max_tokens {body['max_tokens']}"
            with lock:
                tally["done"] += 1
                tally[fin] += 1
            return None
        fin, done, n = None, False, 0
        while True:
            line = r.readline()
            if not line:
                break
            if not line.startswith(b"data: "):
                continue
            n += 1
            if hang_up and n >= rng.randint(1, 5):
                with lock:
                    tally["hung_up"] += 1
                return None  # the finally closes the socket mid-stream
            payload = line[6:].strip()
            if payload == b"[DONE]":
                done = True
                break
            j = json.loads(payload)
            if j.get("choices") and j["choices"][0].get("finish_reason"):
                fin = j["choices"][0]["finish_reason"]
        if hang_up:  # it ended before the client hung up
            with lock:
                tally["hung_up"] += 1
            return None
        if not done or fin not in ("stop", "length"):
            return f"{path} stream: done={done} finish={fin}"
        with lock:
            tally["done"] += 1
            tally[fin] += 1
        return None
    except Exception as e:  # a timeout: hung
        return f"{path}: {type(e).__name__}: {e}"
    finally:
        c.close()


def client(s, i, until, chat_ok):
    rng = random.Random(a.seed * 1000 + i)
    corpus = cases()
    while time.time() < until:
        if rng.random() < a.corpus:
            name, raw, allowed, half = rng.choice(corpus)
            try:
                st = send(s.port, raw, timeout=a.timeout, half_close=half)
                err = None if st in allowed else f"corpus {name}: {st}"
            except OSError as e:
                err = f"corpus {name}: {e}"
            if not err:
                with lock:
                    tally["bad_ok"] += 1
        else:
            err = one(s, rng, chat_ok)
        if err:
            with lock:
                tally["errors"].append(err)


s = Server(a.server, a.config, a.model, ["-np", str(a.np)])
failures = []
try:
    _, props = s.get("/props")
    chat_ok = bool(props.get("chat_template"))
    # Warm-up: every path once, then the starting RSS.
    for i in range(4):
        one(s, random.Random(i), chat_ok)
    rss = [(0.0, rss_kib(s.p.pid))]
    start = time.time()
    until = start + a.minutes * 60
    threads = [threading.Thread(target=client, args=(s, i, until, chat_ok)) for i in range(a.clients)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        time.sleep(5)
        if s.p.poll() is not None:
            failures.append(f"the server exited: {s.stderr()[-800:]}")
            break
        if time.time() - start - rss[-1][0] >= a.rss_every:
            rss.append((time.time() - start, rss_kib(s.p.pid)))
            print(f"  {rss[-1][0] / 60:5.1f} min: RSS {rss[-1][1] / 1024:.1f} MiB, {tally['done']} answered, {tally['hung_up']} hung up, "
                  f"{tally['bad_ok']} corpus, {len(tally['errors'])} errors", flush=True)
    for t in threads:
        t.join(a.timeout + 30)
    deadline = time.time() + 30
    while time.time() < deadline and (metric(s, "requests_processing") != 0 or metric(s, "kv_pages_used") != 0):
        time.sleep(0.2)
    rss.append((time.time() - start, rss_kib(s.p.pid)))
    up = s.p.poll() is None and s.get("/health")[0] == 200
    held = {k: metric(s, k) for k in ("requests_processing", "requests_waiting", "kv_pages_used", "kv_pages_free", "requests_total")}
    print(f"soak: {a.minutes} min, {a.clients} clients: {tally['done']} answered ({tally['stop']} stop, {tally['length']} length), "
          f"{tally['hung_up']} hung up mid-stream, {tally['bad_ok']} corpus requests refused as they should be, {len(tally['errors'])} errors")
    print("RSS MiB: " + ", ".join(f"{t / 60:.1f} min {k / 1024:.1f}" for t, k in rss))
    print(f"at the end: up {up}, {held}")
    if not up:
        failures.append("the server is not up at the end")
    if held["requests_processing"] != 0 or held["requests_waiting"] != 0 or held["kv_pages_used"] != 0:
        failures.append(f"held at the end: {held}")
    if tally["errors"]:
        failures.append(f"{len(tally['errors'])} errors, e.g. {tally['errors'][:3]}")
    # Every request the server accepted (the warm-up's too) was answered in full or hung up on.
    if held["requests_total"] != tally["done"] + tally["hung_up"]:
        failures.append(f"requests_total {held['requests_total']} != {tally['done']} answered + {tally['hung_up']} hung up: some were lost")
finally:
    s.stop()
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
