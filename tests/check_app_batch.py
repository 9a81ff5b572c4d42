#!/usr/bin/env python3
"""minfer-app running many prompts at once (--prompt-file FILE --parallel N, and `prompts:`):
llama.cpp's greedy continuations for every stories260K reference prompt, one JSON object per
line in input order, the same text as each prompt run alone (also when sampling, seeded),
and clear errors. Run from the repository root:
    check_app_batch.py APP WORK_DIR [CONFIG]
"""
import json
import os
import subprocess
import sys

from checks import check, finish

app, work = sys.argv[1], sys.argv[2]
config = sys.argv[3] if len(sys.argv) > 3 else "configs/cpu.yaml"
os.makedirs(work, exist_ok=True)
testdata = "../shared/testdata"
stories = f"{testdata}/models/stories260K.gguf"


def run(args, timeout=120):
    p = subprocess.run([app, "--config", config] + args, capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8"), p.stderr.decode("utf-8", "replace")


if not os.path.exists(stories):
    print(f"SKIP: {stories} not found")
    sys.exit(0)

with open(f"{testdata}/reference/stories260K.greedy.jsonl") as f:
    refs = [json.loads(line) for line in f if line.strip()]
# Each reference prompt twice, and a blank line (skipped): eight sequences, three at a time,
# so some wait, join later and finish at different steps.
prompts = [r["prompt"] for r in refs] + [r["prompt"] for r in reversed(refs)]
path = os.path.join(work, "prompts.txt")
with open(path, "w") as f:
    f.write("\n".join(prompts[:4]) + "\n\n" + "\n".join(prompts[4:]) + "\n")

rc, out, err = run(["--prompt-file", path, "--parallel", "3", "--temp", "0", "-n", "64", "--json"])
check(rc == 0, f"--prompt-file --parallel 3: rc={rc}: {err[-400:]}")
lines = [json.loads(line) for line in out.splitlines() if line.strip()]
check(len(lines) == len(prompts), f"{len(lines)} JSON lines for {len(prompts)} prompts")
for i, o in enumerate(lines):
    ref = next(r for r in refs if r["prompt"] == prompts[i])
    check(o.get("index") == i and o.get("prompt") == prompts[i], f"line {i}: in input order, with its prompt: {o.get('index')}, {o.get('prompt')!r}")
    check(o.get("token_ids") == ref["greedy_tokens"], f"line {i}: llama.cpp's greedy tokens for {prompts[i]!r}")
    check(o.get("text") == ref["greedy_text"], f"line {i}: text {o.get('text')!r}")
    check(o.get("prompt_tokens") == len(ref["prompt_tokens"]) and o.get("tokens") == 64 and o.get("stop") == "n_predict",
          f"line {i}: counts and finish reason: {o.get('prompt_tokens')}, {o.get('tokens')}, {o.get('stop')}")
check("at most 3 sequences a step" in err, f"the summary names the batch: {err[-300:]}")

# Sampling with a seed: each prompt's text is what it gets alone with that seed.
rc, out, err = run(["--prompt-file", path, "--parallel", "4", "--temp", "0.8", "--seed", "7", "-n", "40", "--json"])
check(rc == 0, f"sampled batch: rc={rc}: {err[-300:]}")
batched = [json.loads(line)["text"] for line in out.splitlines() if line.strip()]
for i in (0, 2, 5):
    rc, out1, err1 = run(["-p", prompts[i], "--temp", "0.8", "--seed", "7", "-n", "40", "--json"])
    check(rc == 0 and json.loads(out1)["text"] == batched[i], f"prompt {i} sampled alone (seed 7) gives the batched text: {err1[-200:]}")

# prompts: in the run config, plain text output in input order.
cfg = os.path.join(work, "prompts.yaml")
with open(cfg, "w") as f:
    f.write(open(config).read().replace('prompt: "Once upon a time"', "") + "\nprompts:\n" + "".join(f"  - {json.dumps(p)}\n" for p in prompts[:4]))
p = subprocess.run([app, "--config", cfg, "--temp", "0", "-n", "64"], capture_output=True, timeout=120)
text = p.stdout.decode("utf-8")
want = "".join(r["prompt"] + r["greedy_text"] + "\n\n" for r in refs)
check(p.returncode == 0 and text == want, f"prompts: as text: rc={p.returncode}, {text[:200]!r} vs {want[:200]!r}")

# Errors: a prompt file of blank lines; --prompt-file beside -p; a prompt longer than the context.
blank = os.path.join(work, "blank.txt")
with open(blank, "w") as f:
    f.write("\n  \n\n")
rc, out, err = run(["--prompt-file", blank])
check(rc == 2 and "holds no prompts" in err, f"blank prompt file: rc={rc}: {err[-200:]}")
rc, out, err = run(["--prompt-file", path, "-p", "x"])
check(rc == 2 and "leave out -p and -f" in err, f"--prompt-file with -p: rc={rc}: {err[-200:]}")
long_path = os.path.join(work, "long.txt")
with open(long_path, "w") as f:
    f.write("Once upon a time\n" + "the dog " * 1500 + "\n")
rc, out, err = run(["--prompt-file", long_path, "--temp", "0", "-n", "8", "--json"])
res = [json.loads(line) for line in out.splitlines() if line.strip()]
check(rc == 1 and len(res) == 2 and "text" in res[0] and "context holds" in res[1].get("error", ""),
      f"a prompt beyond the context fails alone (exit 1), the others run: rc={rc}, {out[-300:]}")

finish("minfer-app batch")
