#!/usr/bin/env python3
"""minfer-app as a user meets it: the text it prints (stream and --json) against llama.cpp's
references, valid UTF-8 whatever the bytes, and a clear error (exit 2) for every request it
cannot honour. Run from the repository root:
    check_app_text.py APP GGUF_TOOL WORK_DIR
"""
import json
import os
import subprocess
import sys

from checks import check, finish

app, gguf_tool, work = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(work, exist_ok=True)
testdata = "../shared/testdata"
stories = f"{testdata}/models/stories260K.gguf"


def run(args, timeout=60, **kw):
    """(exit code, stdout bytes, stderr text); every run is bounded in time."""
    p = subprocess.run(args, capture_output=True, timeout=timeout, **kw)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def refused(args, says, what):
    """The run must exit 2 and its error must contain `says`."""
    rc, out, err = run(args)
    check(rc == 2 and says in err, f"{what}: rc={rc}, expected the error '{says}', got: {err.strip()[-400:]}")


def strict(b, what):
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError as e:
        check(False, f"{what}: stdout is not valid UTF-8 ({e})")
        return b.decode("utf-8", "replace")


cpu = ["--config", "configs/cpu.yaml"]

# --- the text: llama.cpp's greedy continuations, as --json and as the stream -----------------
if os.path.exists(stories):
    with open(f"{testdata}/reference/stories260K.greedy.jsonl") as f:
        refs = [json.loads(line) for line in f if line.strip()]
    for r in refs:
        n = str(len(r["greedy_tokens"]))
        rc, out, err = run([app, *cpu, "-p", r["prompt"], "-n", n, "--temp", "0", "--json"])
        check(rc == 0, f"--json run of '{r['prompt']}': {err}")
        if rc == 0:
            j = json.loads(out)
            check(j["prompt_token_ids"] == r["prompt_tokens"], f"prompt_token_ids of '{r['prompt']}': {j['prompt_token_ids']}")
            check(j["token_ids"] == r["greedy_tokens"], f"token_ids of '{r['prompt']}': {j['token_ids']}")
            check(j["text"] == r["greedy_text"], f"--json text of '{r['prompt']}': {j['text']!r} vs {r['greedy_text']!r}")
            check(j["prompt_tokens"] == len(r["prompt_tokens"]) and j["tokens"] == len(r["greedy_tokens"]), "token counts")
        rc, out, err = run([app, *cpu, "-p", r["prompt"], "-n", n, "--temp", "0"])
        want = r["prompt"] + r["greedy_text"] + "\n"
        check(rc == 0 and strict(out, "stream") == want, f"streamed text of '{r['prompt']}': {out!r} vs {want!r}")
    # The example: the first generated word keeps its space.
    rc, out, _ = run([app, *cpu, "-p", "Sam wanted to be a", "-n", "12", "--temp", "0"])
    check(out.startswith(b"Sam wanted to be a good"), f"'Sam wanted to be a' continues with ' good': {out!r}")

    # A stop string ends the text in the stream as in --json, and is shown in neither.
    stopcfg = os.path.join(work, "stop.yaml")
    with open(stopcfg, "w") as f:
        f.write(f"model: {stories}\nbackends: {{cpu: {{}}}}\ngeneration: {{temperature: 0, n_predict: 32, stop: [girl, zzz]}}\n")
    rc, out, _ = run([app, "--config", stopcfg, "-p", "Once upon a time"])
    check(rc == 0 and out == b"Once upon a time, there was a little \n", f"the stream stops before the stop string: {out!r}")
    rc, out, _ = run([app, "--config", stopcfg, "-p", "Once upon a time", "--json"])
    j = json.loads(out) if rc == 0 else {}
    check(j.get("text") == ", there was a little " and j.get("stop") == "stop string", f"--json text before the stop string: {j}")

    # --- valid UTF-8 whatever the bytes ----------------------------------------------------------
    bad = os.path.join(work, "invalid-utf8.txt")
    raw = b"Sam \xff\xfe wanted \xe2\x82 to \xed\xa0\x80 go"
    with open(bad, "wb") as f:
        f.write(raw)
    rc, out, err = run([app, *cpu, "-f", bad, "-n", "4", "--temp", "0"])
    shown = raw.decode("utf-8", "replace")  # one U+FFFD per maximal ill-formed subpart
    check(rc == 0 and strict(out, "invalid prompt").startswith(shown), f"invalid prompt bytes shown as {shown!r}: {out[:60]!r}")
    # High temperature: byte tokens sampled in any order. Stream and --json carry the same valid text.
    # No top-k/top-p/min-p cut: the 256 byte tokens of the 512 are all in play.
    wild = os.path.join(work, "wild.yaml")
    with open(wild, "w") as f:
        f.write(f"model: {stories}\nbackends: {{cpu: {{}}}}\n"
                "generation: {temperature: 100, top_k: 0, top_p: 1, min_p: 0}\n")
    for seed in ("1", "2", "3"):
        args = [app, "--config", wild, "-p", "Once", "-n", "200", "--seed", seed]
        rc1, stream, e1 = run(args)
        rc2, js, e2 = run(args + ["--json"])
        check(rc1 == 0 and rc2 == 0, f"high-temperature runs (seed {seed}): {e1} {e2}")
        if rc1 == 0 and rc2 == 0:
            text = strict(stream, f"high-temperature stream (seed {seed})")
            j = json.loads(js)
            check(text == "Once" + j["text"] + "\n", f"stream and --json text differ (seed {seed}): {text!r} vs {j['text']!r}")

    # --- requests it cannot honour: a clear error, exit 2 -----------------------------------------
    refused([app, *cpu, "-p", ""], "the prompt is empty", "-p ''")
    refused([app, *cpu, "-f", "/dev/null"], "the prompt is empty (/dev/null holds nothing)", "-f /dev/null")
    with open(os.path.join(work, "dirprompt.yaml"), "w") as f:
        f.write(f"model: {stories}\nbackends: {{cpu: {{}}}}\nprompt_file: {work}\n")
    refused([app, "--config", os.path.join(work, "dirprompt.yaml")], "the prompt file is a directory", "prompt_file: a directory")
    for flag, value, says in [("-n", "-5", "-n takes an integer from 0 to 2147483647, not '-5'"),
                              ("-n", "4294967297", "not '4294967297'"),
                              ("--seed", "-1", "--seed takes an integer from 0 to 18446744073709551615, not '-1'"),
                              ("--temp", "", "--temp takes a finite number, not ''"),
                              ("--temp", "nan", "not 'nan'"),
                              ("--temp", "-1", "--temp: 'temperature' is -1"),
                              ("--threads", "abc", "--threads takes an integer from 1 to 1024, not 'abc'"),
                              ("--threads", "0", "not '0'")]:
        refused([app, *cpu, "-p", "hi", flag, value], says, f"{flag} {value!r}")
    fifo = os.path.join(work, "fifo.gguf")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    refused([app, *cpu, "-m", fifo, "-p", "hi"], "not a regular file", "a FIFO as the model (must not hang)")
    rc, out, err = run([app, *cpu, "-p", "hi", "-n", "2", "--threads", "1000"])
    check(rc == 0 and "threads 1000 is more than the" in err, f"threads 1000: a warning and a run at the core count: {err}")
    with open(os.path.join(work, "longctx.yaml"), "w") as f:
        f.write(f"model: {stories}\nbackends: {{cpu: {{}}}}\ncontext: 4096\nprompt: hi\ngeneration: {{n_predict: 2}}\n")
    rc, out, err = run([app, "--config", os.path.join(work, "longctx.yaml")])
    check(rc == 0 and "context 4096 is more than the 2048 positions" in err, f"context above training: a warning: {err}")

    # minfer-gguf quantize: bad thread counts, a directory as output (nothing left behind).
    refused([gguf_tool, "quantize", stories, os.path.join(work, "q.gguf"), "q8_0", "--threads", "abc"],
            "--threads takes an integer from 1 to 1024, not 'abc'", "quantize --threads abc")
    refused([gguf_tool, "quantize", stories, os.path.join(work, "q.gguf"), "q8_0", "--threads", "0"], "not '0'", "quantize --threads 0")
    outdir = os.path.join(work, "outdir")
    os.makedirs(outdir, exist_ok=True)
    rc, _, err = run([gguf_tool, "quantize", stories, outdir, "f16"])
    check(rc != 0 and "is a directory; give the output file's path" in err, f"quantize into a directory: rc={rc} {err}")
    left = [n for n in os.listdir(work) if n.endswith(".part")]
    check(not left, f"temporary files left behind: {left}")
else:
    print("note: ../shared/testdata not found; skipping the stories260K checks")

finish("minfer-app text and errors")
