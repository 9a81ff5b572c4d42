#!/usr/bin/env python3
"""minfer-server against a corpus of malformed, truncated, huge, wrongly typed and hostile
requests (tests/server_corpus.py), with silent, slow and vanishing clients among them, while
well-formed streaming requests run the whole time: each bad one gets its 4xx (or a closed
connection where HTTP itself is broken) within a bound, none crashes or stalls the server, every
good one streams exactly the text it gets alone, and at the end no sequence or page is held.
    check_server_corpus.py SERVER [CONFIG]      (run from the repository root)"""
import http.client
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_corpus import cases, send  # noqa: E402
from server_harness import Server, check, finish, metric  # noqa: E402

server_bin = sys.argv[1]
config = sys.argv[2] if len(sys.argv) > 2 else "configs/cpu.yaml"
stories = "../shared/testdata/models/stories260K.gguf"
if not os.path.exists(stories):
    print(f"SKIP: {stories} not found")
    sys.exit(0)


def streamed_text(port, body, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", "/v1/completions", body=json.dumps(dict(body, stream=True)), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read().decode()
        if r.status != 200:
            return f"HTTP {r.status}: {raw[:200]}"
        text = ""
        for block in raw.split("\n\n"):
            if block.startswith("data: {"):
                ch = json.loads(block[6:])
                text += "".join(x["text"] for x in ch["choices"])
        return text if raw.rstrip().endswith("data: [DONE]") else "no [DONE]"
    finally:
        c.close()


s = Server(server_bin, config, stories, ["-np", "4", "--timeout", "20", "--embeddings"])
try:
    good = {"prompt": "Once upon a time", "max_tokens": 300, "temperature": 0}
    want = streamed_text(s.port, good)
    check(len(want) > 100, f"the reference text: {want[:100]!r}")

    # Well-formed requests for the whole run, each compared with the reference.
    done = threading.Event()
    good_runs, good_bad = [0], []

    def good_client():
        while not done.is_set() and good_runs[0] < 2000:
            got = streamed_text(s.port, good)
            good_runs[0] += 1
            if got != want:
                good_bad.append(got[:200])

    goods = [threading.Thread(target=good_client) for _ in range(2)]
    for t in goods:
        t.start()

    # Clients that misbehave at the socket: silent, slow, gone half way.
    def silent():
        with socket.create_connection(("127.0.0.1", s.port), timeout=60) as c:
            c.settimeout(60)
            t0 = time.time()
            try:
                c.recv(100)  # the server must hang up on its own
            except (socket.timeout, ConnectionResetError):
                pass
            silent_s.append(time.time() - t0)

    def slow():
        with socket.create_connection(("127.0.0.1", s.port), timeout=60) as c:
            for b in b"GET /health HTTP/1.1\r\nHost: x\r\n":
                c.sendall(bytes([b]))
                time.sleep(0.05)

    def vanishing():
        for _ in range(20):
            with socket.create_connection(("127.0.0.1", s.port), timeout=10) as c:
                body = json.dumps({"prompt": "Once upon a time", "max_tokens": 500, "stream": True}).encode()
                c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                          + str(len(body)).encode() + b"\r\n\r\n" + body)
                c.recv(300)  # a first piece, then gone

    silent_s = []
    odd = [threading.Thread(target=f) for f in (silent, slow, vanishing)]
    for t in odd:
        t.start()

    n_cases = 0
    for name, raw, allowed, half_close in cases():
        t0 = time.time()
        try:
            status = send(s.port, raw, timeout=30, half_close=half_close)
        except (socket.timeout, OSError) as e:
            status = f"no answer: {e}"
        took = time.time() - t0
        n_cases += 1
        check(status in allowed, f"{name}: {status}, wanted one of {sorted(allowed, key=str)}")
        check(took < 20, f"{name}: took {took:.1f} s")
        if s.p.poll() is not None:
            check(False, f"the server died at {name}: {s.stderr()[-800:]}")
            break
    done.set()
    for t in goods + odd:
        t.join(timeout=90)
    check(not any(t.is_alive() for t in goods + odd), "every client thread ended")
    print(f"{n_cases} bad requests; {good_runs[0]} good ones alongside; a silent client dropped after {silent_s}")
    check(good_runs[0] >= 2 and not good_bad, f"the good requests alongside: {good_runs[0]} runs, {len(good_bad)} different: {good_bad[:2]}")
    check(silent_s and silent_s[0] < 30, f"a silent connection is closed by the server: {silent_s}")
    check(s.p.poll() is None and s.get("/health")[0] == 200, "the server is up at the end")
    deadline = time.time() + 20
    while time.time() < deadline and (metric(s, "requests_processing") != 0 or metric(s, "kv_pages_used") != 0):
        time.sleep(0.1)
    check(metric(s, "requests_processing") == 0 and metric(s, "kv_pages_used") == 0 and metric(s, "requests_waiting") == 0,
          "no sequence or page held at the end")
    check(streamed_text(s.port, good) == want, "a request after the corpus gets the same text")
finally:
    s.stop()

finish("server corpus")
