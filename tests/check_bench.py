#!/usr/bin/env python3
"""minfer-bench as llama-bench runs it: comma lists for -p, -n and -d/--n-depth, every test at
every depth (labels 'pp16 @ d40'), the depth's tokens really in the cache (n_kv), Markdown
and JSON, and clear errors for bad lists. Run from the repository root:
    check_bench.py BENCH
"""
import json
import os
import subprocess
import sys

from checks import check, finish

bench = sys.argv[1]
stories = "../shared/testdata/models/stories260K.gguf"


def run(args, timeout=120):
    p = subprocess.run([bench, "-m", stories] + args, capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8"), p.stderr.decode("utf-8", "replace")


if not os.path.exists(stories):
    print(f"SKIP: {stories} not found")
    sys.exit(0)

rc, out, err = run(["-p", "16,32", "-n", "8", "-d", "0,40", "-r", "2", "--json"])
check(rc == 0, f"-p 16,32 -n 8 -d 0,40: rc={rc}: {err[-400:]}")
rows = json.loads(out) if rc == 0 else []
want = [("pp16", 16, 0), ("pp16 @ d40", 16, 40), ("pp32", 32, 0), ("pp32 @ d40", 32, 40), ("tg8", 8, 0), ("tg8 @ d40", 8, 40)]
check([(r["test"], r["tokens"], r["n_depth"]) for r in rows] == want, f"tests {[r['test'] for r in rows]}, want {[w[0] for w in want]}")
for r in rows:
    check(r["n_kv"] == r["n_depth"] + r["tokens"], f"{r['test']}: {r['n_kv']} positions in the cache, want {r['n_depth'] + r['tokens']}")
    check(r["reps"] == 2 and r["tps_mean"] > 0, f"{r['test']}: reps {r['reps']}, {r['tps_mean']} t/s")

rc, out, err = run(["-p", "0", "-n", "4,8", "--n-depth", "100", "-r", "1"])
check(rc == 0, f"-p 0 -n 4,8 --n-depth 100: rc={rc}: {err[-400:]}")
tests = [line.split("|")[6].strip() for line in out.splitlines() if line.startswith("| llama")]
check(tests == ["tg4 @ d100", "tg8 @ d100"], f"Markdown tests {tests}")

for args, msg in [(["-p", "1,,2"], "-p takes a comma-separated list of counts"), (["-d", "-5"], "-d takes a comma-separated list of counts"),
                  (["-n", "8x"], "-n takes a comma-separated list of counts"), (["-p", "0", "-n", "0"], "nothing to run")]:
    rc, out, err = run(args)
    check(rc == 1 and msg in err, f"{' '.join(args)}: rc={rc}, stderr {err.strip()!r}, want {msg!r}")

finish("bench lists")
