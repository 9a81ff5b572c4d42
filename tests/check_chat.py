#!/usr/bin/env python3
"""Chat end to end, on synthetic models carrying real chat templates (Llama 3.1, Gemma 2,
Qwen2.5) and the real vocabularies they go with:
  - `minfer-gguf template` renders the reference conversations exactly as jinja2 did (the
    vectors' text), and its --tokens are that text tokenized with one BOS;
  - `minfer-app` with `chat: true`, `system:` and `messages:` feeds exactly those tokens;
  - the interactive mode keeps the KV cache: a second turn prefills only its own tokens;
  - errors: no template, a template's raise_exception, a contradicting config, a full context.
    check_chat.py APP GGUF_TOOL WORK_DIR        (from the repository root)
"""
import json
import os
import re
import subprocess
import sys

from checks import check, finish

app, tool, work = sys.argv[1], sys.argv[2], sys.argv[3]
td = "../shared/testdata"
if not os.path.isdir(f"{td}/templates"):
    print("note: ../shared/testdata not found; skipping the chat checks")
    sys.exit(0)
os.makedirs(work, exist_ok=True)


def run(args, stdin=None, timeout=120):
    p = subprocess.run(args, input=stdin, capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def model(name, vocab, template):
    path = os.path.join(work, name + ".gguf")
    if not os.path.exists(path):
        args = [tool, "synth", "--arch", "qwen2", "--preset", "tiny", "--type", "q8_0", "--seed", "1",
                "--vocab", f"{td}/vocab/{vocab}", "-o", path]
        if template:
            args += ["--chat-template", f"{td}/templates/{template}.jinja"]
        rc, _, err = run(args)
        if rc != 0:
            sys.exit(f"synthesizing {name}: {err}")
    return path


def config(name, text):
    path = os.path.join(work, name + ".yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


models = {
    "llama31": (model("llama31", "ggml-vocab-llama-bpe.gguf", "meta-llama-Llama-3.1-8B-Instruct"), "meta-llama-Llama-3.1-8B-Instruct"),
    "gemma2": (model("gemma2", "ggml-vocab-gemma3.gguf", "google-gemma-2-2b-it"), "google-gemma-2-2b-it"),
    "qwen25": (model("qwen25", "ggml-vocab-qwen2.gguf", "Qwen-Qwen2.5-7B-Instruct"), "Qwen-Qwen2.5-7B-Instruct"),
}
base = "backends: {cpu: {threads: 2}}\ngeneration: {n_predict: 6, temperature: 0}\n"

for key, (path, tname) in models.items():
    with open(f"{td}/templates/{tname}.cases.jsonl") as f:
        cases = [json.loads(line) for line in f if line.strip()]
    for c in cases:
        msgs = os.path.join(work, f"{key}-case{c['case']}.json")
        with open(msgs, "w") as f:
            json.dump(c["messages"], f, ensure_ascii=False)
        args = [tool, "template", path, "--messages", msgs, "--date", "2026-07-26"]
        if not c["add_generation_prompt"]:
            args.append("--no-generation-prompt")
        rc, out, err = run(args)
        if "error" in c:
            check(rc == 1 and c["error"] in err, f"{key} case {c['case']}: the template's error, exit 1: rc={rc} {err}")
            continue
        check(rc == 0 and out == c["expected"], f"{key} case {c['case']}: rendered {out!r}, jinja2 gave {c['expected']!r}")
        rc, ids, err = run(args + ["--tokens"])
        rc2, want, err2 = run([tool, "tokenize", path, "--no-bos", "-p", c["expected"]])
        ids, want = json.loads(ids or "[]"), json.loads(want or "[]")
        bos = json.loads(run([tool, "tokenize", path, "-p", ""])[1] or "[]")
        if bos and not c["expected"].startswith(c["bos_token"] or "\0"):
            want = bos + want  # the tokenizer's BOS, when the template did not write it
        check(ids == want, f"{key} case {c['case']}: --tokens {ids[:12]}... vs the text tokenized {want[:12]}...")
        check(len(ids) < 2 or ids[0] != ids[1], f"{key} case {c['case']}: a double BOS {ids[:3]}")

    # The app feeds exactly what the template and the tokenizer give (case 3: three turns).
    c3 = next(c for c in cases if c["case"] == 3)
    msgs = os.path.join(work, f"{key}-case3.json")
    yaml_msgs = "messages:\n" + "".join(
        f"  - {{role: {m['role']}, content: {json.dumps(m['content'])}}}\n" for m in c3["messages"][:-1])
    cfg = config(f"{key}-chat", base + f"model: {path}\nchat: true\n" + yaml_msgs + f"prompt: {json.dumps(c3['messages'][-1]['content'])}\n")
    rc, out, err = run([app, "--config", cfg, "--json"])
    rc2, ids, _ = run([tool, "template", path, "--messages", msgs, "--tokens"])
    check(rc == 0 and rc2 == 0 and json.loads(out)["prompt_token_ids"] == json.loads(ids),
          f"{key}: chat: true feeds the template's tokens: {err}")

    # Interactive: the second turn reuses the whole cache and prefills only its own tokens.
    cfg = config(f"{key}-i", base + f"model: {path}\n")
    rc, out, err = run([app, "--config", cfg, "--interactive"], stdin=b"Hello there\nTell me a joke, please\n/clear\nAgain\n")
    turns = [tuple(int(x) for x in m.groups()[:3]) + (m.group(4),) for m in re.finditer(
        r"\[turn (\d+): prefilled (\d+) tokens \((\d+) from the cache\).*?\| (\d+) tokens", err)]
    stops = re.findall(r"stop: ([a-z_ ]+)\]", err)
    check(rc == 0 and len(turns) == 3, f"{key} interactive: three turns reported: rc={rc} {err}")
    if len(turns) == 3:
        (t1, pre1, _, gen1), (t2, pre2, cache2, gen2), (t3, pre3, cache3, _) = turns
        fed1 = pre1 + int(gen1) - (1 if stops[0] == "n_predict" else 0)  # the last sampled token waits for the next turn
        own = len(json.loads(run([tool, "tokenize", path, "--no-bos", "-p", "Tell me a joke, please"])[1]))
        check(cache2 == fed1, f"{key} interactive: turn 2 reuses all {fed1} tokens of turn 1, reused {cache2}")
        check(own < pre2 <= own + 24, f"{key} interactive: turn 2 prefills its own {own} tokens and the template's few, not {pre2}")
        check(t3 == 1 and cache3 == 0, f"{key} interactive: /clear starts over (turn {t3}, {cache3} from the cache)")

# Errors, each with its message.
bare = model("bare", "ggml-vocab-gpt-2.gguf", None)
rc, _, err = run([app, "--config", config("bare", base + f"model: {bare}\nchat: true\nprompt: hi\n")])
check(rc == 2 and "has no chat template" in err and "chat_template:" in err, f"no template: {err}")
inline = "{% for m in messages %}<<{{ m.role }}:{{ m.content }}>>{% endfor %}{% if add_generation_prompt %}<<assistant:{% endif %}"
rc, out, err = run([app, "--config", config("inline", base + f"model: {bare}\nchat_template: {json.dumps(inline)}\nprompt: hi\n"), "--json"])
rc2, ids, _ = run([tool, "tokenize", bare, "--no-bos", "-p", "<<user:hi>><<assistant:"])
check(rc == 0 and json.loads(out)["prompt_token_ids"] == json.loads(ids), f"an inline chat_template: {err}")
gemma = models["gemma2"][0]
rc, _, err = run([app, "--config", config("gsys", base + f"model: {gemma}\nchat: true\nsystem: be brief\nprompt: hi\n")])
check(rc == 2 and "chat template, line" in err and "System role not supported" in err, f"raise_exception reaches the user: {err}")
rc, _, err = run([app, "--config", config("contra", base + f"model: {gemma}\nchat: false\nmessages: [{{role: user, content: x}}]\n")])
check(rc == 2 and "'chat: false' contradicts 'messages'" in err, f"chat: false with messages: {err}")
qwen = models["qwen25"][0]
small = config("small", base.replace("n_predict: 6", "n_predict: 4") + f"model: {qwen}\ncontext: 48\n")
rc, out, err = run([app, "--config", small, "-i"], stdin=("word " * 60 + "\nhi\n").encode())
check(rc == 0 and "[the context is full: this turn needs" in err and "[turn 1:" in err,
      f"a turn that does not fit says so and the next one runs: {err}")

finish("chat checks")
