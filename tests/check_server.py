#!/usr/bin/env python3
"""minfer-server over HTTP, as an OpenAI client sees it: llama.cpp's greedy continuations of
the stories260K reference prompts from /v1/completions (alone and four at once), streaming
that adds up to the same text, stop strings, token-id prompts, chat through a real template,
the API key, a client that goes away mid-stream, /health, /v1/models, /tokenize,
/detokenize, /props, /metrics and clear 4xx errors. Every server binds 127.0.0.1 on a free
port and is stopped at the end, also on failure. Run from the repository root:
    check_server.py SERVER [CONFIG]
"""
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import Server as HarnessServer, check, finish, metric  # noqa: E402

server_bin = sys.argv[1]
config = sys.argv[2] if len(sys.argv) > 2 else "configs/cpu.yaml"
testdata = "../shared/testdata"
stories = f"{testdata}/models/stories260K.gguf"
template = f"{testdata}/templates/Qwen-Qwen3-0.6B.jinja"


if not os.path.exists(stories):
    print(f"SKIP: {stories} not found")
    sys.exit(0)
with open(f"{testdata}/reference/stories260K.greedy.jsonl") as f:
    refs = [json.loads(line) for line in f if line.strip()]


def Server(args, env=None):
    return HarnessServer(server_bin, config, stories, args, env)


def template_server(template_path, name, args):
    """A stories260K server whose chat goes through another template (the run config's others kept)."""
    cfg = f"/tmp/minfer-server-{name}.yaml"
    with open(cfg, "w") as f:
        f.write("\n".join(line for line in open(config).read().splitlines() if not line.startswith("chat:")) +
                f"\nchat_template: {os.path.abspath(template_path)}\n")
    return HarnessServer(server_bin, cfg, stories, args)


servers = []
try:
    s = Server(["-np", "4", "--alias", "stories"])
    servers.append(s)
    status, body = s.get("/v1/models")
    check(status == 200 and body["data"][0]["id"] == "stories" and body["object"] == "list", f"/v1/models: {status} {body}")

    # Greedy: llama.cpp's tokens, as text and as counts.
    def complete(prompt, n=64, **extra):
        return s.post("/v1/completions", dict({"prompt": prompt, "max_tokens": n, "temperature": 0}, **extra))

    for r in refs:
        status, body = complete(r["prompt"])
        ok = status == 200 and body["choices"][0]["text"] == r["greedy_text"]
        check(ok, f"greedy completion of {r['prompt']!r}: {status} {str(body)[:300]}")
        if status == 200:
            check(body["object"] == "text_completion" and body["id"].startswith("cmpl-") and body["choices"][0]["finish_reason"] == "length"
                  and {k: v for k, v in body["usage"].items() if k != "prompt_tokens_details"} ==
                  {"prompt_tokens": len(r["prompt_tokens"]), "completion_tokens": 64, "total_tokens": len(r["prompt_tokens"]) + 64}
                  and 0 <= body["usage"]["prompt_tokens_details"]["cached_tokens"] < len(r["prompt_tokens"]), f"completion fields: {body}")

    # Four clients at once (and again, eight requests over four slots): each the text it gets alone.
    results = {}

    def client(i):
        results[i] = complete(refs[i % len(refs)]["prompt"])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for i in range(8):
        st, b = results.get(i, (None, None))
        check(st == 200 and b["choices"][0]["text"] == refs[i % len(refs)]["greedy_text"], f"concurrent request {i}: {st} {str(b)[:200]}")

    # A long prompt sent twice: the second finds its full pages cached, and the same text.
    long_prompt = refs[0]["prompt_tokens"] + refs[0]["greedy_tokens"]
    first = complete(long_prompt, 16)
    second = complete(long_prompt, 16)
    cached = second[1]["usage"]["prompt_tokens_details"]["cached_tokens"] if second[0] == 200 else -1
    check(first[0] == 200 and second[0] == 200 and first[1]["choices"] == second[1]["choices"] and
          len(long_prompt) - 16 <= cached < len(long_prompt), f"prefix reuse: cached_tokens {cached} of {len(long_prompt)}")

    # Token ids as the prompt: the same continuation.
    status, body = complete(refs[0]["prompt_tokens"])
    check(status == 200 and body["choices"][0]["text"] == refs[0]["greedy_text"], f"token-id prompt: {status} {str(body)[:200]}")

    # echo: the prompt's text before the completion, for a text or a token-id prompt, streamed
    # first; with logprobs (the prompt's log-probabilities) and best_of above 1: 400s.
    status, body = complete(refs[0]["prompt"], echo=True)
    check(status == 200 and body["choices"][0]["text"] == refs[0]["prompt"] + refs[0]["greedy_text"], f"echo: {status} {str(body)[:300]}")
    status, body = complete(refs[0]["prompt_tokens"], echo=True)
    check(status == 200 and body["choices"][0]["text"].endswith(refs[0]["greedy_text"]) and
          body["choices"][0]["text"][:-len(refs[0]["greedy_text"]) or None].strip() == refs[0]["prompt"].strip(),
          f"echo of a token-id prompt: {status} {str(body)[:300]}")
    status, _, events = s.stream("/v1/completions", {"prompt": refs[0]["prompt"], "max_tokens": 64, "temperature": 0, "echo": True})
    pieces = [e["choices"][0]["text"] for e in events if isinstance(e, dict) and e.get("choices")]
    check(status == 200 and pieces and pieces[0] == refs[0]["prompt"] and "".join(pieces) == refs[0]["prompt"] + refs[0]["greedy_text"],
          f"echo streamed: {pieces[:3]}")
    # echo with logprobs scores the prompt (lm-evaluation-harness's loglikelihood requests): a
    # greedy continuation's logprobs come back as the scored prompt's last entries.
    status, g = complete(refs[0]["prompt"], 12, logprobs=1)
    glp = g["choices"][0]["logprobs"]["token_logprobs"] if status == 200 else []
    status, sc = complete(refs[0]["prompt"] + g["choices"][0]["text"], 0, logprobs=1, echo=True)
    slp = sc["choices"][0]["logprobs"] if status == 200 else {}
    check(status == 200 and sc["choices"][0]["text"] == refs[0]["prompt"] + g["choices"][0]["text"] and sc["usage"]["completion_tokens"] == 0 and
          slp["token_logprobs"][0] is None and len(slp["tokens"]) == sc["usage"]["prompt_tokens"] and
          all(abs(a - b) < 2e-3 for a, b in zip(slp["token_logprobs"][-len(glp):], glp)) and len(glp) == 12,
          f"echo + logprobs + max_tokens 0 scores the prompt: {status} {str(sc)[:400]} against {glp}")
    status, body = s.post("/v1/completions", {"prompt": refs[0]["prompt"], "max_tokens": 0, "echo": True, "logprobs": 1, "stream": True})
    check(status == 400 and "stream" in body["error"]["message"], f"scoring streamed: {status} {body}")
    status, body = complete(refs[0]["prompt"], best_of=2)
    check(status == 400 and "best_of" in body["error"]["message"], f"best_of 2: {status} {body}")

    # Streaming adds up to the same text, one id, finish reason last, usage when asked, [DONE].
    status, ctype, events = s.stream("/v1/completions", {"prompt": refs[1]["prompt"], "max_tokens": 64, "temperature": 0,
                                                         "stream_options": {"include_usage": True}})
    chunks = [e for e in events if isinstance(e, dict)]
    check(status == 200 and ctype.startswith("text/event-stream") and events and events[-1] == "[DONE]", f"stream: {status} {ctype} {events[-1:]}")
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    check(text == refs[1]["greedy_text"], f"streamed text {text!r}")
    check(len({c["id"] for c in chunks}) == 1, "one id for every chunk")
    with_choice = [c for c in chunks if c["choices"]]
    check(with_choice and with_choice[-1]["choices"][0]["finish_reason"] == "length" and
          all(c["choices"][0]["finish_reason"] is None for c in with_choice[:-1]), "finish_reason only on the last chunk")
    check(chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 64, f"usage chunk: {chunks[-1]}")
    # The framing byte by byte: nothing but "data: " + one line of compact JSON + a blank line,
    # each event, and the body ends with exactly "data: [DONE]\n\n".
    raw = s.last_stream
    check(re.fullmatch(r"(data: \{[^\n\r]*\}\n\n)+data: \[DONE\]\n\n", raw) is not None, f"SSE framing: {raw[:120]!r} ... {raw[-60:]!r}")
    check(all(json.dumps(json.loads(line[6:]), separators=(",", ":"), ensure_ascii=False) == line[6:]
              for line in raw.split("\n\n") if line.startswith("data: {")), "each event is one compact JSON object")

    # Temperature 0: the server's text is minfer-app's for the same prompt and count.
    app = os.path.join(os.path.dirname(os.path.abspath(server_bin)), "minfer-app")
    if os.path.exists(app):
        for r in refs[:2]:
            p = subprocess.run([app, "--config", config, "-m", stories, "-p", r["prompt"], "-n", "48", "--temp", "0", "--json"],
                               capture_output=True, text=True, timeout=120)
            want_app = json.loads(p.stdout)["text"] if p.returncode == 0 else f"minfer-app failed: {p.stderr[-300:]}"
            status, body = complete(r["prompt"], 48)
            check(status == 200 and body["choices"][0]["text"] == want_app, f"server vs minfer-app for {r['prompt']!r}: {str(body)[:160]} vs {want_app[:160]!r}")

    # Log-probabilities (the completions API's form): one per token, the greedy token the likeliest.
    status, body = complete(refs[1]["prompt"], 16, logprobs=2)
    lp = body["choices"][0]["logprobs"] if status == 200 else None
    check(lp is not None and len(lp["tokens"]) == 16 and "".join(lp["tokens"]) == body["choices"][0]["text"] and
          all(v <= 0 for v in lp["token_logprobs"]) and all(len(t) == 2 for t in lp["top_logprobs"]) and
          all(abs(max(t.values()) - v) < 1e-6 for t, v in zip(lp["top_logprobs"], lp["token_logprobs"])) and
          lp["text_offset"][0] == 0 and body["choices"][0]["text"] == refs[1]["greedy_text"][:len(body["choices"][0]["text"])],
          f"completion logprobs: {status} {str(lp)[:300]}")
    status, _, events = s.stream("/v1/completions", {"prompt": refs[1]["prompt"], "max_tokens": 16, "temperature": 0, "logprobs": 1})
    streamed = [t for e in events if isinstance(e, dict) and e["choices"] and e["choices"][0]["logprobs"]
                for t in e["choices"][0]["logprobs"]["tokens"]]
    check(lp is not None and streamed == lp["tokens"], f"streamed logprobs cover every token once: {streamed} vs {lp and lp['tokens']}")
    check(complete(refs[1]["prompt"], 4)[1]["choices"][0]["logprobs"] is None, "no logprobs unless asked")

    # Stop strings: cut before the first, finish_reason "stop", alike when streamed.
    full = refs[0]["greedy_text"]
    stop = " named"
    status, body = complete(refs[0]["prompt"], stop=[stop, "zzz"])
    want = full[:full.index(stop)]
    check(status == 200 and body["choices"][0]["text"] == want and body["choices"][0]["finish_reason"] == "stop",
          f"stop string: {status} {str(body)[:200]} (want {want!r})")
    status, _, events = s.stream("/v1/completions", {"prompt": refs[0]["prompt"], "max_tokens": 64, "temperature": 0, "stop": stop})
    text = "".join(e["choices"][0]["text"] for e in events if isinstance(e, dict) and e["choices"])
    check(text == want, f"streamed with a stop string: {text!r}")

    # Sampling with a seed repeats itself.
    a = complete(refs[2]["prompt"], 32, temperature=0.9, seed=11)
    b = complete(refs[2]["prompt"], 32, temperature=0.9, seed=11)
    check(a[0] == 200 and b[0] == 200 and a[1]["choices"] == b[1]["choices"], f"seeded sampling repeats: {a} vs {b}")

    # A frequency penalty steers greedy decoding off its repeats (the story repeats words).
    status, body = complete(refs[0]["prompt"], frequency_penalty=2.0)
    check(status == 200 and body["choices"][0]["text"] != refs[0]["greedy_text"], f"frequency_penalty changes the text: {status} {str(body)[:200]}")

    # A client that leaves mid-stream: its sequence ends and its pages return.
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    c.request("POST", "/v1/completions", body=json.dumps({"prompt": refs[0]["prompt"], "max_tokens": 2000, "stream": True}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    r.read(200)
    c.close()
    deadline = time.time() + 30
    while time.time() < deadline and (metric(s, "requests_processing") != 0 or metric(s, "kv_pages_used") != 0):
        time.sleep(0.1)
    check(metric(s, "requests_processing") == 0 and metric(s, "kv_pages_used") == 0, "a client gone mid-stream frees its sequence")
    check(metric(s, "tokens_predicted_total") >= 64 * 12 and metric(s, "prompt_tokens_total") > 0, "metrics count tokens")
    check(metric(s, "prompt_tokens_seconds") > 0 and metric(s, "predicted_tokens_seconds") > 0 and
          metric(s, "decode_tokens_total") >= 64 * 12, "metrics give prefill and decode rates")

    # /tokenize and /detokenize round trip; /props.
    status, body = s.post("/tokenize", {"content": refs[0]["prompt"], "add_special": True})
    check(status == 200 and body["tokens"] == refs[0]["prompt_tokens"], f"/tokenize: {status} {body}")
    status, body = s.post("/tokenize", {"content": refs[0]["prompt"] + " \u00e9!", "with_pieces": True})
    pieces = body.get("tokens", []) if status == 200 else []
    joined = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces)
    check(status == 200 and all(isinstance(p["id"], int) for p in pieces) and joined.decode("utf-8", "replace").endswith(" \u00e9!") and
          refs[0]["prompt"].split()[-1] in joined.decode("utf-8", "replace"), f"/tokenize with_pieces: {status} {str(body)[:300]}")
    status, body = s.post("/detokenize", {"tokens": refs[0]["greedy_tokens"]})
    check(status == 200 and body["content"] == refs[0]["greedy_text"], f"/detokenize: {status} {str(body)[:200]}")
    # A body that is no JSON says so (not only what shape was expected); a wrong shape names it.
    for path, bad, word in [("/tokenize", "{not json", "not JSON"), ("/detokenize", "[1,", "not JSON"),
                            ("/tokenize", {"text": "x"}, "content"), ("/detokenize", {"tokens": "x"}, "tokens")]:
        status, body = s.post(path, bad)
        check(status == 400 and word in body["error"]["message"], f"{path} {str(bad)[:30]}: {status} {str(body)[:200]}")
    status, body = s.get("/props")
    check(status == 200 and body["total_slots"] == 4 and body["n_ctx"] > 0, f"/props: {status} {body}")
    dgs = body.get("default_generation_settings", {}) if status == 200 else {}
    check(dgs.get("n_ctx") == body.get("n_ctx") and "temperature" in dgs.get("params", {}) and body.get("eos_token") == "</s>" and
          body.get("modalities") == {"vision": False, "audio": False} and body.get("build_info", "").startswith("minfer "),
          f"/props' llama-server fields: {str(body)[:400]}")

    # A batch of prompts (OpenAI's list form, as evaluation harnesses send it): choice i*n + j is
    # prompt i's choice j, each the text that prompt gets alone; text and token-id prompts alike.
    status, body = complete([refs[0]["prompt"], refs[1]["prompt"]])
    texts = [c["text"] for c in sorted(body.get("choices", []), key=lambda c: c["index"])] if status == 200 else []
    check(texts == [refs[0]["greedy_text"], refs[1]["greedy_text"]] and
          body["usage"]["prompt_tokens"] == len(refs[0]["prompt_tokens"]) + len(refs[1]["prompt_tokens"]), f"a batch of two prompts: {status} {str(body)[:300]}")
    status, body = complete([refs[1]["prompt_tokens"], refs[0]["prompt_tokens"]], n=16)
    got = [c["text"] for c in body["choices"]] if status == 200 else []
    check(len(got) == 2 and all(g and r["greedy_text"].startswith(g) for g, r in zip(got, [refs[1], refs[0]])),
          f"a batch of token-id prompts (16 greedy tokens each, prefixes of their 64): {status} {str(body)[:300]}")
    status, body = complete(["x", 5])
    check(status == 400 and "'prompt'" in body["error"]["message"], f"a batch with a number in it: {status} {body}")
    # n > 1 streamed: each choice's chunks carry its index, the texts are the unstreamed ones
    # (same seeds), the usage counts every choice, [DONE] last.
    many = {"prompt": refs[1]["prompt"], "max_tokens": 12, "temperature": 1.0, "seed": 11, "n": 3}
    status, whole_reply = s.post("/v1/completions", many)
    status_s, _, events = s.stream("/v1/completions", dict(many, stream_options={"include_usage": True}))
    chunks = [e for e in events if isinstance(e, dict)]
    streamed = {}
    for c in chunks:
        for ch in c["choices"]:
            streamed[ch["index"]] = streamed.get(ch["index"], "") + ch["text"]
    finals = [ch["index"] for c in chunks for ch in c["choices"] if ch["finish_reason"]]
    check(status == 200 and status_s == 200 and streamed == {c["index"]: c["text"] for c in whole_reply["choices"]} and sorted(finals) == [0, 1, 2] and
          chunks[-1]["usage"]["completion_tokens"] == whole_reply["usage"]["completion_tokens"] and events[-1] == "[DONE]",
          f"n=3 streamed: {streamed} vs {str(whole_reply)[:300]}")
    # Errors: 400s that name the field, 404 for an unknown path.
    for bad, word in [("{not json", "JSON"), ({"prompt": "x", "n": 17}, "'n'"), ({"prompt": "x", "temperature": -1}, "temperature"),
                      ({"prompt": "x", "response_format": {"type": "json_schema"}}, "response_format"), ({"prompt": []}, "empty"),
                      ({"prompt": [999999]}, "vocabulary"), ({"max_tokens": 4}, "prompt"), ({"prompt": "x", "stop": 3}, "stop"),
                      ({"prompt": "x " * 3000}, "context")]:
        status, body = s.post("/v1/completions", bad)
        check(status == 400 and word in body["error"]["message"], f"{str(bad)[:60]}: {status} {str(body)[:200]}")
    status, body = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    check(status == 400 and "chat template" in body["error"]["message"], f"chat without a template: {status} {body}")
    # logit_bias: +100 on one token makes the greedy text that token over and over; -100 on the
    # greedy first token makes the text start otherwise.
    status, toks = s.post("/tokenize", {"content": " the"})
    the = toks["tokens"][-1] if status == 200 else 0
    status, body = complete(refs[0]["prompt"], n=4, logit_bias={str(the): 100})
    check(status == 200 and body["choices"][0]["text"] == " the" * 4, f"logit_bias +100 on {the}: {status} {str(body)[:200]}")
    first = refs[0]["greedy_tokens"][0]
    first_text = s.post("/detokenize", {"tokens": [first]})[1]["content"]
    status, body = complete(refs[0]["prompt"], n=4, logit_bias={str(first): -100}, logprobs=0)
    got = body["choices"][0]["logprobs"]["tokens"] if status == 200 else []
    check(len(got) == 4 and got[0] != first_text, f"logit_bias -100 on the greedy first token {first} ({first_text!r}): {status} {str(body)[:300]}")
    # vLLM's ignore_eos and min_tokens (benchmarks ask for fixed lengths): with the end of
    # generation pushed to the top (stories260K's tokenizer.ggml.eos_token_id is 2) the reply ends
    # at once; min_tokens 6 holds it for 6 tokens, their text the greedy one; ignore_eos runs to
    # max_tokens. A stop string inside the held tokens does not count.
    eos = {"2": 30}
    st0, b0 = complete(refs[0]["prompt"], n=24, logit_bias=eos)
    st1, b1 = complete(refs[0]["prompt"], n=24, logit_bias=eos, min_tokens=6, logprobs=0)
    st2, b2 = complete(refs[0]["prompt"], n=24, logit_bias=eos, ignore_eos=True)
    check(st0 == 200 and b0["usage"]["completion_tokens"] == 0 and b0["choices"][0]["finish_reason"] == "stop", f"EOS pushed up: {st0} {str(b0)[:200]}")
    held = b1["choices"][0]["logprobs"]["tokens"] if st1 == 200 else []
    check(st1 == 200 and len(held) == 6 and b1["choices"][0]["finish_reason"] == "stop" and refs[0]["greedy_text"].startswith(b1["choices"][0]["text"]),
          f"min_tokens 6: {st1} {str(b1)[:300]}")
    check(st2 == 200 and b2["usage"]["completion_tokens"] == 24 and b2["choices"][0]["finish_reason"] == "length", f"ignore_eos: {st2} {str(b2)[:200]}")
    word = held[1].strip() if len(held) > 1 else "?"
    st3, b3 = complete(refs[0]["prompt"], n=24, logit_bias=eos, min_tokens=6, stop=[word])
    check(st3 == 200 and b1.get("choices") and b3["choices"][0]["text"] == b1["choices"][0]["text"], f"a stop string in the held tokens: {st3} {str(b3)[:200]}")
    st4, b4 = s.post("/completion", {"prompt": refs[0]["prompt"], "n_predict": 8, "temperature": 0, "logit_bias": [[2, 30]], "ignore_eos": True})
    check(st4 == 200 and b4["tokens_predicted"] == 8 and b4["stop_type"] == "limit", f"/completion ignore_eos: {st4} {str(b4)[:200]}")
    # stop_token_ids: the greedy text's fourth token (a first occurrence) ends it there, its text left out.
    g = refs[0]["greedy_tokens"]
    k = next(i for i in range(3, len(g)) if g[i] not in g[:i])
    st5, b5 = complete(refs[0]["prompt"], n=24, stop_token_ids=[g[k]])
    want = s.post("/detokenize", {"tokens": g[:k]})[1]["content"]
    check(st5 == 200 and b5["choices"][0]["text"] == want and b5["choices"][0]["finish_reason"] == "stop" and b5["usage"]["completion_tokens"] == k + 1,
          f"stop_token_ids [{g[k]}]: {st5} {str(b5)[:200]} (want {want!r})")
    for bad, word in [({"min_tokens": 30}, "min_tokens"), ({"repeat_penalty": 1.1, "repetition_penalty": 1.2}, "repetition_penalty"),
                      ({"ignore_eos": "yes"}, "ignore_eos"), ({"stop_token_ids": [99999]}, "stop_token_ids"), ({"stop_token_ids": 5}, "stop_token_ids")]:
        status, body = complete(refs[0]["prompt"], n=24, **bad)
        check(status == 400 and word in body["error"]["message"], f"{bad}: {status} {str(body)[:200]}")
    # grammar (llama.cpp's GBNF): greedy and sampled replies are texts of the grammar, ended
    # where root is complete; /completion takes it too; a bad grammar is a 400 saying where.
    yes_no = 'root ::= "Answer: " ("yes" | "no") "." [ a-z]{0,12} "!"'
    status, body = complete(refs[0]["prompt"], n=40, grammar=yes_no)
    text = body["choices"][0]["text"] if status == 200 else ""
    check(re.fullmatch(r"Answer: (yes|no)\.[ a-z]{0,12}!", text) is not None and body["choices"][0]["finish_reason"] == "stop",
          f"greedy grammar: {status} {str(body)[:200]}")
    listing = 'root ::= item ("," " "? item){2,4}\nitem ::= [0-9]{1,6} | "\\"" [a-z ]{1,8} "\\""'
    for seed in (1, 2, 3):
        status, body = complete(refs[1]["prompt"], n=60, grammar=listing, temperature=1.0, seed=seed)
        text = body["choices"][0]["text"] if status == 200 else ""
        item = r'([0-9]{1,6}|"[a-z ]{1,8}")'
        check(status == 200 and (re.fullmatch(item + r"(, ?" + item + r"){2,4}", text) is not None or body["choices"][0]["finish_reason"] == "length"),
              f"sampled grammar (seed {seed}): {status} {str(body)[:200]}")
    status, body = s.post("/completion", {"prompt": refs[0]["prompt"], "n_predict": 30, "temperature": 0, "grammar": 'root ::= [A-Z] [a-z]+ " " [0-9]{3}'})
    check(status == 200 and re.fullmatch(r"[A-Z][a-z]+ [0-9]{3}", body.get("content", "")) is not None, f"/completion grammar: {status} {str(body)[:200]}")
    for bad, word in [({"grammar": "root ::= item"}, "line 1, column 10"), ({"grammar": 'root ::= "a"', "response_format": {"type": "json_object"}}, "grammar"),
                      ({"grammar": "root ::= x\nx ::= x \"a\" | \"b\""}, "left-recursive"), ({"grammar": 7}, "grammar")]:
        status, body = complete(refs[0]["prompt"], n=8, **bad)
        check(status == 400 and word in body["error"]["message"], f"{bad}: {status} {str(body)[:200]}")
    # response_format json_object: whatever this story model would say, the reply is a prefix of
    # one JSON object, and a whole one when it ends by itself.
    for seed in (1, 2, 3):
        status, body = complete("Once upon a time", n=48, temperature=1.0, seed=seed, response_format={"type": "json_object"})
        text = body["choices"][0]["text"] if status == 200 else ""
        reason = body["choices"][0]["finish_reason"] if status == 200 else None
        ok = status == 200 and text.lstrip().startswith("{")
        if ok and reason == "stop":
            try:
                ok = isinstance(json.loads(text), dict)
            except ValueError:
                ok = False
        check(ok, f"json_object (seed {seed}): {status} finish {reason} {text!r}")
        print(f"json_object (seed {seed}): {reason} {text!r}")
    # response_format json_schema: the reply is a value of the schema (key order, types, bounds,
    # the enum), and with every string bounded this story model's replies end by themselves.
    person = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                               "mood": {"enum": ["happy", "sad"]}, "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"}, "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 2}},
              "required": ["name", "age", "mood", "code"]}
    for seed in (1, 2, 3):
        status, body = complete("Once upon a time", n=160, temperature=1.0, seed=seed,
                                response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": person, "strict": True}})
        text = body["choices"][0]["text"] if status == 200 else ""
        reason = body["choices"][0]["finish_reason"] if status == 200 else None
        try:
            v = json.loads(text)
            ok = (reason == "stop" and list(v)[:4] == ["name", "age", "mood", "code"] and set(v) <= {"name", "age", "mood", "code", "tags"} and
                  re.fullmatch(r"[A-Z]{2}-[0-9]{3}", v["code"]) and
                  isinstance(v["name"], str) and len(v["name"]) <= 12 and type(v["age"]) is int and 0 <= v["age"] <= 120 and v["mood"] in ("happy", "sad") and
                  (("tags" not in v) or (len(v["tags"]) <= 2 and all(isinstance(t, str) and len(t) <= 6 for t in v["tags"]))))
        except ValueError:
            ok = False
        check(status == 200 and ok, f"json_schema (seed {seed}): {status} finish {reason} {text!r}")
        print(f"json_schema (seed {seed}): {reason} {text!r}")
    # Greedy under a schema: where the arg-max is allowed, the backend's arg-max is the token and
    # no logits are read; only refused positions read their row (the metrics count both).
    before = (metric(s, "argmax_rows_total"), metric(s, "logit_rows_total"))
    status, body = complete("Once upon a time", n=160, temperature=0,
                            response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": person, "strict": True}})
    after = (metric(s, "argmax_rows_total"), metric(s, "logit_rows_total"))
    try:
        v = json.loads(body["choices"][0]["text"]) if status == 200 else None
    except ValueError:
        v = None
    used = body["usage"]["completion_tokens"] if status == 200 else 0
    check(isinstance(v, dict) and re.fullmatch(r"[A-Z]{2}-[0-9]{3}", v.get("code", "")), f"greedy json_schema: {status} {str(body)[:300]}")
    # (The rows include the end token's, which the usage does not count.)
    check(after[0] - before[0] > 0 and 0 < after[1] - before[1] < used and after[0] - before[0] + after[1] - before[1] == used + 1,
          f"greedy json_schema: {after[0] - before[0]} arg-max rows, {after[1] - before[1]} logit rows for {used} tokens")
    status, body = complete("x", n=4, response_format={"type": "json_schema", "json_schema": {"name": "z", "schema": {"type": "array", "uniqueItems": True}}})
    check(status == 400 and "'uniqueItems'" in body["error"]["message"], f"json_schema with uniqueItems over any items: {status} {body}")
    # uniqueItems over scalars: a greedy reply of distinct strings (the story model would repeat one).
    tags = {"type": "array", "items": {"type": "string", "maxLength": 6}, "minItems": 4, "maxItems": 4, "uniqueItems": True}
    status, body = complete(refs[0]["prompt"], n=80, response_format={"type": "json_schema", "json_schema": {"name": "t", "schema": tags}})
    text = body["choices"][0]["text"] if status == 200 else ""
    check(status == 200 and body["choices"][0]["finish_reason"] == "stop" and len(json.loads(text)) == 4 and len(set(json.loads(text))) == 4,
          f"json_schema uniqueItems: {status} {text!r}")
    # n choices: each its own sequence and seed (three different texts at temperature 1, the
    # same twice at 0), the usage counting the prompt once and every choice's tokens.
    status, nb = s.post("/v1/completions", {"prompt": refs[0]["prompt"], "max_tokens": 16, "temperature": 1.0, "seed": 7, "n": 3})
    texts = [c["text"] for c in nb["choices"]] if status == 200 else []
    check(status == 200 and [c["index"] for c in nb["choices"]] == [0, 1, 2] and len(set(texts)) >= 2 and
          nb["usage"]["completion_tokens"] == 48 and nb["usage"]["prompt_tokens"] == len(refs[0]["prompt_tokens"]), f"n=3: {status} {str(nb)[:400]}")
    status, again = s.post("/v1/completions", {"prompt": refs[0]["prompt"], "max_tokens": 16, "temperature": 1.0, "seed": 7, "n": 3})
    check(status == 200 and [c["text"] for c in again["choices"]] == texts, "n=3 with a seed repeats itself")
    status, nb = s.post("/v1/completions", {"prompt": refs[0]["prompt"], "max_tokens": 64, "temperature": 0, "n": 2})
    check(status == 200 and all(c["text"] == refs[0]["greedy_text"] for c in nb["choices"]), f"n=2 greedy: {status} {str(nb)[:300]}")
    # llama-server's own /completion: the same greedy text, its fields, its stream (pieces, then
    # the result with stop: true, no [DONE]), a stop word, and n_predict 0 (the prompt only).
    status, nb = s.post("/completion", {"prompt": refs[0]["prompt"], "n_predict": 64, "temperature": 0, "cache_prompt": True})
    check(status == 200 and nb["content"] == refs[0]["greedy_text"] and nb["stop"] is True and nb["stop_type"] == "limit" and
          nb["tokens_predicted"] == 64 and nb["tokens_evaluated"] == len(refs[0]["prompt_tokens"]) and nb["timings"]["predicted_n"] == 64 and
          nb["timings"]["predicted_per_second"] > 0, f"/completion: {status} {str(nb)[:400]}")
    status, ctype, events = s.stream("/completion", {"prompt": refs[0]["prompt"], "n_predict": 64, "temperature": 0, "stream": True})
    pieces = [e for e in events if isinstance(e, dict)]
    check(status == 200 and pieces and all(e["stop"] is False for e in pieces[:-1]) and pieces[-1]["stop"] is True and "[DONE]" not in events and
          "".join(e["content"] for e in pieces) == refs[0]["greedy_text"] and pieces[-1]["tokens_predicted"] == 64,
          f"/completion stream: {status} {str(events[-2:])[:400]}")
    word = refs[0]["greedy_text"].split()[3]
    status, nb = s.post("/completion", {"prompt": refs[0]["prompt"], "n_predict": 64, "temperature": 0, "stop": [word]})
    check(status == 200 and nb["stop_type"] == "word" and nb["stopping_word"] == word and refs[0]["greedy_text"].startswith(nb["content"]) and
          word not in nb["content"], f"/completion stop word {word!r}: {status} {str(nb)[:300]}")
    status, nb = s.post("/completion", {"prompt": refs[1]["prompt"], "n_predict": 0})
    check(status == 200 and nb["content"] == "" and nb["tokens_predicted"] == 0 and nb["tokens_evaluated"] == len(refs[1]["prompt_tokens"]),
          f"/completion n_predict 0: {status} {str(nb)[:300]}")
    # n_probs: llama-server's completion_probabilities, the same log-probabilities /v1/completions
    # gives, each token with its n likeliest; streamed, each piece carries its tokens'.
    status, nb = s.post("/completion", {"prompt": refs[0]["prompt"], "n_predict": 8, "temperature": 0, "n_probs": 3})
    _, lp = complete(refs[0]["prompt"], n=8, logprobs=3)
    probs = nb.get("completion_probabilities", []) if status == 200 else []
    want = lp["choices"][0]["logprobs"] if "choices" in lp else {}
    check(status == 200 and len(probs) == 8 and [p["token"] for p in probs] == want.get("tokens") and
          all(abs(p["logprob"] - w) < 1e-4 for p, w in zip(probs, want.get("token_logprobs", []))) and
          all(len(p["top_logprobs"]) == 3 and p["top_logprobs"][0]["logprob"] >= p["top_logprobs"][-1]["logprob"] and
              bytes(p["bytes"]).decode("utf-8", "replace") == p["token"] and isinstance(p["id"], int) for p in probs),
          f"/completion n_probs: {status} {str(nb)[:400]} against {str(want)[:300]}")
    status, _, events = s.stream("/completion", {"prompt": refs[0]["prompt"], "n_predict": 8, "temperature": 0, "n_probs": 2, "stream": True})
    streamed = [p for e in events if isinstance(e, dict) and not e.get("stop") for p in e.get("completion_probabilities", [])]
    check(status == 200 and [p["token"] for p in streamed] == [p["token"] for p in probs] and all(len(p["top_logprobs"]) == 2 for p in streamed),
          f"/completion n_probs streamed: {status} {str(events[:3])[:400]}")
    # llama.cpp's other samplers: DRY turns a greedy reply away from repeating the prompt's
    # sentence; XTC, mirostat 2, typical and top-n-sigma are taken; mirostat 1 and tfs_z are 400s.
    rep = "Lily and Tom went to the park. Lily and Tom went to the park. Lily and Tom went to the"
    st_a, plain = s.post("/completion", {"prompt": rep, "n_predict": 8, "temperature": 0})
    st_b, dry = s.post("/completion", {"prompt": rep, "n_predict": 8, "temperature": 0, "dry_multiplier": 2})
    check(st_a == 200 and st_b == 200 and plain["content"].startswith(" park") and not dry["content"].startswith(" park"),
          f"DRY: {st_a} {plain.get('content')!r} vs {st_b} {dry.get('content')!r}")
    for extra in ({"xtc_probability": 0.5, "xtc_threshold": 0.1}, {"mirostat": 2, "mirostat_tau": 3}, {"typical_p": 0.9, "top_n_sigma": 1.0}):
        status, body = s.post("/v1/completions", dict({"prompt": rep, "max_tokens": 8, "temperature": 1, "seed": 5}, **extra))
        check(status == 200 and body["usage"]["completion_tokens"] > 0, f"{extra}: {status} {str(body)[:200]}")
    for bad, word in [({"mirostat": 1}, "'mirostat' 1"), ({"tfs_z": 0.5}, "'tfs_z'"), ({"dry_sequence_breakers": [""]}, "dry_sequence_breakers")]:
        status, body = s.post("/completion", dict({"prompt": "x", "n_predict": 2}, **bad))
        check(status == 400 and word in body["error"]["message"], f"{bad}: {status} {str(body)[:200]}")
    status, nb = s.post("/completion", {"prompt": "x", "grammar": "root ::= \"a\""})
    check(status == 200 and nb["content"] == "a" and nb["stop_type"] == "eos", f"/completion with a one-text grammar: {status} {nb}")
    status, nb = s.post("/infill", {"input_prefix": "def f():", "input_suffix": "\n"})
    check(status == 400 and "no fill-in-the-middle tokens" in nb["error"]["message"], f"/infill on a model without FIM tokens: {status} {nb}")
    status, body = s.post("/v1/embeddings", {"input": "Once upon a time"})
    check(status == 400 and "--embeddings" in body["error"]["message"], f"/v1/embeddings without --embeddings: {status} {body}")
    status, body = complete("x", n=1, logit_bias={"999999": 1})
    check(status == 400 and "past the vocabulary" in body["error"]["message"], f"logit_bias past the vocabulary: {status} {body}")
    status, body = s.get("/v1/nothing")
    check(status == 404 and "no such endpoint" in body["error"]["message"], f"404: {status} {body}")
    status, body = s.get("/v1/completions")
    check(status == 405 and "POST" in body["error"]["message"], f"405: {status} {body}")
    status, body = s.post("/v1/completions", json.dumps({"prompt": "a " * 5000}), headers={"Content-Type": "application/x-www-form-urlencoded"})
    check(status == 413 and "Content-Type: application/json" in body["error"]["message"], f"a 10 KB form-encoded body: {status} {str(body)[:200]}")
    status, body = s.post("/v1/completions", "x" * (17 << 20))
    check(status == 413, f"a 17 MiB body: {status} {str(body)[:200]}")

    # SIGTERM drains: a stream in flight still completes, then the server exits 0.
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
    c.request("POST", "/v1/completions", body=json.dumps({"prompt": refs[0]["prompt"], "max_tokens": 1500, "temperature": 0,
                                                         "stream": True}), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first = r.readline()
    s.p.terminate()
    rest = r.read().decode()
    c.close()
    check(first.startswith(b"data: ") and rest.rstrip().endswith("data: [DONE]") and '"finish_reason":"length"' in rest,
          f"the stream in flight at SIGTERM completes: {rest[-200:]!r}")
    try:
        rc = s.p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        rc = None
    check(rc == 0, f"the server exits 0 after draining: {rc}")

    # Chat through a real template, and the API key.
    if os.path.exists(template):
        chat_cfg = "/tmp/minfer-server-chat.yaml"
        with open(chat_cfg, "w") as f:
            # The server renders every chat request through the template: no 'chat:' switch.
            kept = [line for line in open(config).read().splitlines() if not line.startswith("chat:")]
            # The key and the name from the run config's server: section (the port stays the flag's).
            f.write("\n".join(kept) + f"\nchat_template: {os.path.abspath(template)}\nserver: {{api_key: sekret, alias: chatty, port: 9}}\n")
        config_saved, config = config, chat_cfg
        k = Server(["-np", "2"])
        servers.append(k)
        config = config_saved
        status, body = k.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
        check(status == 401, f"no key: {status} {body}")
        check(k.get("/health")[0] == 200, "/health needs no key")
        status, page = k.get("/")
        check(status == 200 and isinstance(page, str) and page.startswith("<!doctype html>") and "/v1/chat/completions" in page,
              f"the chat page at / needs no key: {status} {str(page)[:80]!r}")
        auth = {"Content-Type": "application/json", "Authorization": "Bearer sekret"}
        status, body = k.get("/v1/models")
        check(status == 200 and body["data"][0]["id"] == "chatty", f"/v1/models needs no key; the alias from server: {status} {body}")
        check(k.request("GET", "/props", headers={"Authorization": "Bearer sekreT"})[0] == 401, "a wrong key: 401")
        # CORS: a page on localhost (a web UI) gets its preflight answered without the key and
        # may read the answers, a 401 too; another web site's page gets a 403 preflight and no
        # CORS header (the browser then shows it nothing).
        pre = {"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"}
        st, hd, _ = k.exchange("OPTIONS", "/v1/chat/completions", headers=pre)
        check(st == 204 and hd.get("access-control-allow-origin") == "http://localhost:3000" and "POST" in hd.get("access-control-allow-methods", "") and
              "authorization" in hd.get("access-control-allow-headers", ""), f"preflight from localhost: {st} {hd}")
        st, hd, body = k.exchange("OPTIONS", "/v1/chat/completions", headers=dict(pre, Origin="https://evil.example"))
        check(st == 403 and "access-control-allow-origin" not in hd and "--cors-origins" in body, f"preflight from another site: {st} {hd} {body[:120]}")
        st, hd, _ = k.exchange("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "hi"}]}),
                               headers={"Origin": "http://127.0.0.1:5173", "Content-Type": "application/json"})
        check(st == 401 and hd.get("access-control-allow-origin") == "http://127.0.0.1:5173", f"a 401 a local page can read: {st} {hd}")
        st, hd, _ = k.exchange("GET", "/v1/models", headers={"Origin": "https://evil.example"})
        check(st == 200 and "access-control-allow-origin" not in hd, f"no CORS header for another site: {st} {hd}")
        msgs = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Once upon"}]}],
                "max_tokens": 16, "temperature": 0}
        status, body = k.request("POST", "/v1/chat/completions", json.dumps(msgs), headers=auth)
        check(status == 200 and body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-") and
              body["choices"][0]["message"]["role"] == "assistant" and body["usage"]["completion_tokens"] <= 16, f"chat: {status} {str(body)[:300]}")
        status, _, events = k.stream("/v1/chat/completions", msgs, headers=auth)
        chunks = [e for e in events if isinstance(e, dict)]
        check(status == 200 and chunks and chunks[0]["choices"][0]["delta"].get("role") == "assistant" and
              chunks[0]["object"] == "chat.completion.chunk", f"chat stream starts with the role: {chunks[:1]}")
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
        check(status == 200 and text == body["choices"][0]["message"]["content"], f"chat stream text {text!r}")
        # Two chat choices streamed: each index opens with the assistant role, then its text.
        two = dict(msgs, n=2, temperature=1.0, seed=4)
        status, both = k.request("POST", "/v1/chat/completions", json.dumps(two), headers=auth)
        status_s, _, events = k.stream("/v1/chat/completions", two, headers=auth)
        per, roles = {}, {}
        for c in (e for e in events if isinstance(e, dict)):
            for ch in c["choices"]:
                if "role" in ch["delta"]:
                    roles[ch["index"]] = ch["delta"]["role"] if ch["index"] not in per else "late"
                per[ch["index"]] = per.get(ch["index"], "") + (ch["delta"].get("content") or "")
        check(status == 200 and status_s == 200 and roles == {0: "assistant", 1: "assistant"} and
              per == {c["index"]: c["message"]["content"] for c in both["choices"]}, f"chat n=2 streamed: {roles} {per} vs {str(both)[:300]}")
        status, lpb = k.request("POST", "/v1/chat/completions", json.dumps(dict(msgs, logprobs=True, top_logprobs=3)), headers=auth)
        content = lpb["choices"][0]["logprobs"]["content"] if status == 200 else []
        check(status == 200 and len(content) == lpb["usage"]["completion_tokens"] and
              all(len(c["top_logprobs"]) == 3 and c["top_logprobs"][0]["token"] == c["token"] and bytes(c["bytes"]).decode("utf-8", "replace")
                  for c in content) and lpb["choices"][0]["message"] == body["choices"][0]["message"],
              f"chat logprobs: {status} {str(lpb)[:300]}")
        # Tools: offered through the template (the prompt grows by their description), a reply
        # without calls comes back as content, streamed or not, the same text; a call in the
        # history renders; forcing a call is refused.
        weather = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
        with_tools = dict(msgs, tools=[weather])
        status, tb = k.request("POST", "/v1/chat/completions", json.dumps(with_tools), headers=auth)
        check(status == 200 and tb["usage"]["prompt_tokens"] > body["usage"]["prompt_tokens"] + 50 and
              tb["choices"][0]["finish_reason"] in ("length", "stop") and isinstance(tb["choices"][0]["message"]["content"], str) and
              "tool_calls" not in tb["choices"][0]["message"], f"chat with tools: {status} {str(tb)[:300]}")
        status, _, events = k.stream("/v1/chat/completions", with_tools, headers=auth)
        chunks = [e for e in events if isinstance(e, dict) and e.get("choices")]
        streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        check(status == 200 and streamed == tb["choices"][0]["message"]["content"] and chunks[-1]["choices"][0]["finish_reason"] in ("length", "stop"),
              f"chat stream with tools: {streamed!r} against {tb['choices'][0]['message']['content']!r}")
        history = dict(with_tools, messages=msgs["messages"] + [
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                                                                   "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"}])
        status, hb = k.request("POST", "/v1/chat/completions", json.dumps(history), headers=auth)
        check(status == 200 and hb["usage"]["prompt_tokens"] > tb["usage"]["prompt_tokens"] + 10, f"a tool call and its result in the history: {status} {str(hb)[:300]}")
        # chat_template_kwargs reach the template: Qwen 3's enable_thinking false writes an empty
        # think block into the prompt.
        status, nt = k.request("POST", "/v1/chat/completions", json.dumps(dict(msgs, chat_template_kwargs={"enable_thinking": False})), headers=auth)
        check(status == 200 and nt["usage"]["prompt_tokens"] > body["usage"]["prompt_tokens"], f"enable_thinking false: {status} {str(nt)[:300]}")
        status, rb = k.request("POST", "/v1/chat/completions", json.dumps(dict(msgs, chat_template_kwargs={"messages": []})), headers=auth)
        check(status == 400 and "chat_template_kwargs" in rb["error"]["message"], f"chat_template_kwargs setting messages: {status} {rb}")
        # A forced call: the reply is one call as Qwen 3's template writes it, its name one of the
        # tools and its arguments that tool's parameters. get_time takes none, so even this story
        # model writes the whole call and it comes back as tool_calls.
        clock = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
        for choice, names in (("required", ("get_weather", "get_time")), ({"type": "function", "function": {"name": "get_time"}}, ("get_time",))):
            status, rb = k.request("POST", "/v1/chat/completions", json.dumps(dict(with_tools, tools=[weather, clock], tool_choice=choice, max_tokens=80)),
                                   headers=auth)
            m = rb["choices"][0]["message"] if status == 200 else {}
            text = m.get("content") or ""
            calls = m.get("tool_calls") or []
            if calls:
                ok = rb["choices"][0]["finish_reason"] == "tool_calls" and calls[0]["function"]["name"] in names and isinstance(json.loads(calls[0]["function"]["arguments"]), dict)
            else:
                ok = text.startswith("<tool_call>\n{") and any('"%s"' % n in text for n in names)
            if choice != "required":
                ok = ok and calls and calls[0]["function"]["arguments"] == "{}"
            check(status == 200 and ok, f"tool_choice {choice}: {status} {str(rb)[:400]}")
            # Streamed, the call goes out as it is written: its name first, then its arguments'
            # text in pieces that add up to the same arguments.
            status, _, events = k.stream("/v1/chat/completions", dict(with_tools, tools=[weather, clock], tool_choice=choice, max_tokens=80), headers=auth)
            deltas = [c["choices"][0]["delta"]["tool_calls"] for c in events if isinstance(c, dict) and c.get("choices") and "tool_calls" in c["choices"][0]["delta"]]
            reasons = [c["choices"][0]["finish_reason"] for c in events if isinstance(c, dict) and c.get("choices") and c["choices"][0]["finish_reason"]]
            if calls:
                streamed_args = "".join(d[0]["function"].get("arguments", "") for d in deltas)
                check(status == 200 and len(deltas) >= 2 and deltas[0][0]["function"]["name"] == calls[0]["function"]["name"] and
                      deltas[0][0]["id"].startswith("call_") and all(d[0]["index"] == 0 for d in deltas) and
                      json.loads(streamed_args) == json.loads(calls[0]["function"]["arguments"]) and reasons == ["tool_calls"],
                      f"tool_choice {choice} streamed: {deltas} {reasons}")
        # Nesting: parameters past the schema compiler's 64 levels (arrays of arrays) leave an auto call unguarded
        # (200) and refuse a forced one (400 naming the depth); arguments text nested past 128
        # levels in the history is refused.
        nested = {"type": "integer"}
        for _ in range(66):
            nested = {"type": "array", "items": nested}
        deep_tool = {"type": "function", "function": {"name": "deep", "parameters": {"type": "object", "properties": {"a": nested}}}}
        status, rb = k.request("POST", "/v1/chat/completions", json.dumps(dict(msgs, tools=[deep_tool], max_tokens=4)), headers=auth)
        check(status == 200, f"auto with 66-deep parameters: {status} {str(rb)[:200]}")
        status, rb = k.request("POST", "/v1/chat/completions", json.dumps(dict(msgs, tools=[deep_tool], tool_choice="required", max_tokens=4)), headers=auth)
        check(status == 400 and "deeper than 64" in rb["error"]["message"], f"required with 66-deep parameters: {status} {rb}")
        deep_args = {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                                                                           "function": {"name": "get_weather", "arguments": "[" * 5000 + "]" * 5000}}]}
        status, rb = k.request("POST", "/v1/chat/completions", json.dumps(dict(with_tools, messages=msgs["messages"] + [deep_args])), headers=auth)
        check(status == 400 and "deeper than 128" in rb["error"]["message"], f"history arguments nested 5000 deep: {status} {rb}")
        # llama-server's /apply-template: the prompt the chat renders (Qwen 2.5's ChatML), tools
        # in it when offered; its token count is the chat's prompt_tokens.
        status, at = k.request("POST", "/apply-template", json.dumps(msgs), headers=auth)
        check(status == 200 and at.get("prompt", "").endswith("<|im_start|>user\nOnce upon<|im_end|>\n<|im_start|>assistant\n") and
              "<|im_start|>system\nBe brief." in at["prompt"], f"/apply-template: {status} {str(at)[:300]}")
        status, tk = k.request("POST", "/tokenize", json.dumps({"content": at.get("prompt", ""), "add_special": True}), headers=auth)
        check(status == 200 and len(tk["tokens"]) == body["usage"]["prompt_tokens"], f"/apply-template's prompt is the chat's: {len(tk.get('tokens', []))} tokens "
              f"against {body['usage']['prompt_tokens']}")
        status, att = k.request("POST", "/apply-template", json.dumps(with_tools), headers=auth)
        check(status == 200 and "get_weather" in att.get("prompt", "") and "<tools>" in att["prompt"], f"/apply-template with tools: {status} {str(att)[:300]}")
        status, atb = k.request("POST", "/apply-template", json.dumps({"messages": "x"}), headers=auth)
        check(status == 400 and "messages" in atb["error"]["message"], f"/apply-template of a bad request: {status} {atb}")
        # Anthropic's Messages API over the same chat: the same greedy text as /v1/chat/completions,
        # its stream of named events adding up to it, count_tokens, a forced tool_use, x-api-key,
        # and its error shape.
        akey = {"Content-Type": "application/json", "x-api-key": "sekret", "anthropic-version": "2023-06-01"}
        amsgs = {"model": "chatty", "system": [{"type": "text", "text": "Be brief."}], "messages": [{"role": "user", "content": [{"type": "text", "text": "Once upon"}]}],
                 "max_tokens": 16, "temperature": 0}
        status, am = k.request("POST", "/v1/messages", json.dumps(amsgs), headers=akey)
        check(status == 200 and am["type"] == "message" and am["role"] == "assistant" and am["content"] == [{"type": "text", "text": body["choices"][0]["message"]["content"]}]
              and am["stop_reason"] in ("end_turn", "max_tokens") and am["usage"]["input_tokens"] + am["usage"]["cache_read_input_tokens"] == body["usage"]["prompt_tokens"]
              and am["usage"]["output_tokens"] == body["usage"]["completion_tokens"], f"/v1/messages: {status} {str(am)[:400]} against {str(body)[:200]}")
        status, _, _ = k.stream("/v1/messages", amsgs, headers=akey)
        blocks = [b for b in k.last_stream.split("\n\n") if b]
        named = [(b.split("\n")[0][len("event: "):], json.loads(b.split("\n")[1][len("data: "):])) for b in blocks if b.startswith("event: ")]
        kinds = [n for n, _ in named]
        streamed = "".join(d["delta"]["text"] for n, d in named if n == "content_block_delta" and d["delta"]["type"] == "text_delta")
        check(status == 200 and len(named) == len(blocks) and kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"] and
              all(d["type"] == n for n, d in named) and streamed == am["content"][0]["text"] and named[-2][1]["delta"]["stop_reason"] == am["stop_reason"],
              f"/v1/messages stream: {kinds} {streamed!r}")
        status, _, _ = k.stream("/v1/messages", dict(amsgs, max_tokens=60, tools=[{"name": "get_time", "input_schema": {"type": "object", "properties": {}}}],
                                                  tool_choice={"type": "tool", "name": "get_time"}), headers=akey)
        named = [(b.split("\n")[0][len("event: "):], json.loads(b.split("\n")[1][len("data: "):])) for b in k.last_stream.split("\n\n") if b.startswith("event: ")]
        starts = [d["content_block"] for n, d in named if n == "content_block_start" and d["content_block"]["type"] == "tool_use"]
        partial = "".join(d["delta"]["partial_json"] for n, d in named if n == "content_block_delta" and d["delta"]["type"] == "input_json_delta")
        check(status == 200 and len(starts) == 1 and starts[0]["name"] == "get_time" and json.loads(partial) == {} and
              named[-2][1]["delta"]["stop_reason"] == "tool_use", f"/v1/messages forced tool_use streamed: {[n for n, _ in named]} {partial!r}")
        status, ct = k.request("POST", "/v1/messages/count_tokens", json.dumps(amsgs), headers=akey)
        check(status == 200 and ct == {"input_tokens": body["usage"]["prompt_tokens"]}, f"count_tokens: {status} {ct}")
        atools = [{"name": "get_time", "description": "The time", "input_schema": {"type": "object", "properties": {}}},
                  {"name": "get_weather", "input_schema": weather["function"]["parameters"]}]
        status, at = k.request("POST", "/v1/messages", json.dumps(dict(amsgs, max_tokens=60, tools=atools, tool_choice={"type": "tool", "name": "get_time"})),
                               headers=akey)
        check(status == 200 and at["stop_reason"] == "tool_use" and at["content"][-1]["type"] == "tool_use" and at["content"][-1]["name"] == "get_time" and
              at["content"][-1]["input"] == {}, f"/v1/messages forced tool_use: {status} {str(at)[:400]}")
        follow = dict(amsgs, tools=atools, messages=amsgs["messages"] + [{"role": "assistant", "content": at.get("content", [])},
                                                                          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": at["content"][-1].get("id", ""), "content": "12:00"}]}])
        status, fb = k.request("POST", "/v1/messages", json.dumps(follow), headers=akey)
        check(status == 200 and fb["type"] == "message", f"/v1/messages with the tool's result: {status} {str(fb)[:300]}")
        status, ab = k.request("POST", "/v1/messages", json.dumps(amsgs), headers={"Content-Type": "application/json", "x-api-key": "wrong"})
        check(status == 401 and ab["type"] == "error" and ab["error"]["type"] == "authentication_error", f"/v1/messages with a wrong key: {status} {ab}")
        status, ab = k.request("POST", "/v1/messages", json.dumps(dict(amsgs, messages=[{"role": "user", "content": [{"type": "image", "source": {}}]}])), headers=akey)
        check(status == 400 and ab["type"] == "error" and ab["error"]["type"] == "invalid_request_error" and "'image'" in ab["error"]["message"],
              f"/v1/messages with an image: {status} {ab}")
        status, rb = k.request("POST", "/v1/chat/completions", json.dumps(dict(with_tools, tool_choice={"type": "function", "function": {"name": "nope"}})),
                               headers=auth)
        check(status == 400 and "not one of" in rb["error"]["message"], f"tool_choice naming no tool: {status} {rb}")
        check(k.stop() == 0, "the chat server exits 0")
    # Llama 3.1's template: its calls are a reply that opens with '{'. With a +100 bias on '{',
    # this story model opens its reply so, and the constraint of tool_choice auto writes the
    # rest as a call of one of the tools: it comes back as tool_calls. Without tools the same
    # bias gives plain text.
    l31 = f"{testdata}/templates/meta-llama-Llama-3.1-8B-Instruct.jinja"
    if os.path.exists(l31):
        ll = template_server(l31, "llama31", ["-np", "2"])
        servers.append(ll)
        brace = ll.post("/tokenize", {"content": "{"})[1]["tokens"]
        clock = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
        ask = {"messages": [{"role": "user", "content": "What time is it?"}], "max_tokens": 60, "temperature": 0, "logit_bias": {str(brace[-1]): 100}}
        status, lb = ll.post("/v1/chat/completions", dict(ask, tools=[clock]))
        msg = lb["choices"][0]["message"] if status == 200 else {}
        check(status == 200 and lb["choices"][0]["finish_reason"] == "tool_calls" and msg.get("tool_calls") and
              msg["tool_calls"][0]["function"]["name"] == "get_time" and json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {},
              f"Llama 3.1: a reply that opens with '{{' is written as a call: {status} {str(lb)[:400]}")
        # Streamed, the call goes out as it is written: its name, then its arguments in pieces.
        status, _, events = ll.stream("/v1/chat/completions", dict(ask, tools=[clock]))
        deltas = [c["choices"][0]["delta"]["tool_calls"] for c in events if isinstance(c, dict) and c.get("choices") and "tool_calls" in c["choices"][0]["delta"]]
        reasons = [c["choices"][0]["finish_reason"] for c in events if isinstance(c, dict) and c.get("choices") and c["choices"][0]["finish_reason"]]
        streamed_args = "".join(d[0]["function"].get("arguments", "") for d in deltas)
        check(status == 200 and len(deltas) >= 2 and deltas[0][0]["function"]["name"] == "get_time" and deltas[0][0]["function"]["arguments"] == "" and
              all(d[0]["index"] == 0 for d in deltas) and json.loads(streamed_args or "null") == {} and reasons == ["tool_calls"],
              f"Llama 3.1: the call streamed as it is written: {deltas} {reasons}")
        status, plain = ll.post("/v1/chat/completions", ask)
        check(status == 200 and "tool_calls" not in plain["choices"][0]["message"], f"the same bias without tools: {status} {str(plain)[:200]}")
        check(ll.stop() == 0, "the Llama 3.1 server exits 0")
    # Mistral Nemo's and Granite's templates write calls as a JSON list after a marker, Mistral
    # Small 3.2's as [TOOL_CALLS]name[ARGS]{...}. A forced call is that list, one call of the
    # named tool, or that one name[ARGS] call (get_time takes no parameters, so this story model
    # writes it whole); streamed, it goes out as name then arguments.
    for tmpl_name, marker in (("mistralai-Mistral-Nemo-Instruct-2407", "[TOOL_CALLS]"), ("ibm-granite-granite-3.3-2B-Instruct", "<|tool_call|>"),
                              ("Mistral-Small-3.2-24B-Instruct-2506", "[TOOL_CALLS]")):
        path = f"{testdata}/templates/{tmpl_name}.jinja"
        if not os.path.exists(path):
            continue
        ls = template_server(path, tmpl_name.split("-")[0], ["-np", "2"])
        servers.append(ls)
        clock = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
        ask = {"messages": [{"role": "user", "content": "What time is it?"}], "max_tokens": 60, "temperature": 0, "tools": [clock],
               "tool_choice": {"type": "function", "function": {"name": "get_time"}}}
        status, lb = ls.post("/v1/chat/completions", ask)
        msg = lb["choices"][0]["message"] if status == 200 else {}
        check(status == 200 and lb["choices"][0]["finish_reason"] == "tool_calls" and len(msg.get("tool_calls") or []) == 1 and
              msg["tool_calls"][0]["function"]["name"] == "get_time" and json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {},
              f"{tmpl_name}: a forced call after {marker}: {status} {str(lb)[:400]}")
        status, _, events = ls.stream("/v1/chat/completions", ask)
        deltas = [c["choices"][0]["delta"]["tool_calls"] for c in events if isinstance(c, dict) and c.get("choices") and "tool_calls" in c["choices"][0]["delta"]]
        streamed_args = "".join(d[0]["function"].get("arguments", "") for d in deltas)
        check(status == 200 and len(deltas) >= 2 and deltas[0][0]["function"]["name"] == "get_time" and json.loads(streamed_args or "null") == {},
              f"{tmpl_name}: the forced call streamed: {deltas}")
        status, rb = ls.post("/v1/chat/completions", dict(ask, tool_choice="auto", max_tokens=8))
        check(status == 200, f"{tmpl_name}: tool_choice auto: {status} {str(rb)[:200]}")
        check(ls.stop() == 0, f"the {tmpl_name} server exits 0")
    # A thinking template that opens the think block in the prompt (DeepSeek R1's, with
    # enable_thinking): the reply is reasoning until </think>, which this model never writes.
    r1 = f"{testdata}/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
    if os.path.exists(r1):
        d = template_server(r1, "r1", ["-np", "2"])
        servers.append(d)
        ask = {"messages": [{"role": "user", "content": "Once upon"}], "max_tokens": 12, "temperature": 0, "chat_template_kwargs": {"enable_thinking": True}}
        status, plain = d.post("/v1/chat/completions", dict(ask, reasoning_format="none"))
        text = plain["choices"][0]["message"]["content"] if status == 200 else None
        check(status == 200 and text and "reasoning_content" not in plain["choices"][0]["message"], f"reasoning_format none: {status} {str(plain)[:300]}")
        status, split = d.post("/v1/chat/completions", ask)
        msg = split["choices"][0]["message"] if status == 200 else {}
        check(status == 200 and msg.get("content") == "" and msg.get("reasoning_content") == text.strip(),
              f"the open think block as reasoning_content: {status} {str(split)[:300]} (the text: {text!r})")
        status, _, events = d.stream("/v1/chat/completions", ask)
        chunks = [e for e in events if isinstance(e, dict) and e.get("choices")]
        reasoning = "".join(c["choices"][0]["delta"].get("reasoning_content", "") for c in chunks)
        content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        check(status == 200 and reasoning == text and content == "", f"streamed reasoning {reasoning!r}, content {content!r}, against {text!r}")
        # The Responses API: reasoning.effort turns the thinking on; the think block is a
        # reasoning item, streamed as reasoning_text events.
        rask = {"input": "Once upon", "max_output_tokens": 12, "temperature": 0, "reasoning": {"effort": "medium"}}
        status, rr = d.post("/v1/responses", rask)
        items = rr.get("output", []) if status == 200 else []
        check(status == 200 and [i["type"] for i in items] == ["reasoning"] and items[0]["content"][0]["text"] == text.strip() and
              rr["status"] == "incomplete" and rr["usage"]["output_tokens_details"]["reasoning_tokens"] > 0,
              f"/v1/responses: the think block as a reasoning item: {status} {str(rr)[:400]}")
        status, _, _ = d.stream("/v1/responses", rask)
        revents = [json.loads(b.split("\ndata: ", 1)[1]) for b in d.last_stream.split("\n\n") if b.startswith("event: ") and "\ndata: " in b]
        rtypes = [e.get("type") for e in revents]
        rtext = "".join(e["delta"] for e in revents if isinstance(e, dict) and e.get("type") == "response.reasoning_text.delta")
        check(status == 200 and rtext == text and "response.output_text.delta" not in rtypes and rtypes[-1] == "response.incomplete",
              f"/v1/responses streamed reasoning {rtext!r} against {text!r}: {rtypes[:8]}")
        status, rn = d.post("/v1/responses", dict(rask, reasoning={"effort": "none"}))
        check(status == 200 and [i["type"] for i in rn.get("output", [])] == ["message"], f"/v1/responses effort none: {status} {str(rn)[:300]}")
        effort = {k: v for k, v in ask.items() if k != "chat_template_kwargs"}
        status, eb = d.post("/v1/chat/completions", dict(effort, reasoning_effort="high"))
        check(status == 200 and eb["choices"][0]["message"].get("reasoning_content") == text.strip(),
              f"reasoning_effort high thinks as enable_thinking does: {status} {str(eb)[:300]}")
        status, bad = d.post("/v1/chat/completions", dict(ask, reasoning_format="xml"))
        check(status == 400 and "reasoning_format" in bad["error"]["message"], f"a bad reasoning_format: {status} {bad}")
        check(d.stop() == 0, "the R1 server exits 0")
    # /v1/embeddings (--embeddings): the last token's hidden state to unit length, the same alone
    # or among others, for text or its token ids, as floats or base64, cut to `dimensions`; the
    # server's text generation unchanged by the extra output.
    e = Server(["-np", "4", "--embeddings"])
    servers.append(e)
    import base64
    import math
    import struct

    def embed(inp, **kw):
        st, b = e.post("/v1/embeddings", dict({"input": inp, "model": "x"}, **kw))
        return st, b

    status, one = embed("Once upon a time")
    v = one["data"][0]["embedding"] if status == 200 else []
    check(status == 200 and one["object"] == "list" and len(v) == 64 and abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-5 and
          one["usage"]["prompt_tokens"] == len(e.post("/tokenize", {"content": "Once upon a time", "add_special": True})[1]["tokens"]),
          f"/v1/embeddings: {status} {str(one)[:300]}")
    texts = ["The cat sat.", "Once upon a time", "A dog ran far away"]
    status, many = embed(texts)
    vs = [d["embedding"] for d in many["data"]] if status == 200 else []
    check(status == 200 and [d["index"] for d in many["data"]] == [0, 1, 2] and max(abs(a - b) for a, b in zip(vs[1], v)) < 1e-4,
          f"an input among others is the same as alone: {status} {str(many)[:200]}")
    cos = sum(a * b for a, b in zip(vs[0], vs[2]))
    check(status == 200 and cos < 0.9999, f"different texts, different embeddings (cosine {cos})")
    ids = e.post("/tokenize", {"content": "Once upon a time", "add_special": True})[1]["tokens"]
    status, by_ids = embed(ids)
    check(status == 200 and max(abs(a - b) for a, b in zip(by_ids["data"][0]["embedding"], v)) < 1e-5, f"token ids as the input: {status}")
    status, b64 = embed("Once upon a time", encoding_format="base64")
    raw = base64.b64decode(b64["data"][0]["embedding"]) if status == 200 else b""
    check(status == 200 and len(raw) == 256 and max(abs(a - b) for a, b in zip(struct.unpack("<64f", raw), v)) < 1e-6, f"base64: {status} {str(b64)[:200]}")
    status, cut = embed("Once upon a time", dimensions=16)
    c = cut["data"][0]["embedding"] if status == 200 else []
    norm16 = math.sqrt(sum(x * x for x in v[:16]))
    check(status == 200 and len(c) == 16 and max(abs(a - b / norm16) for a, b in zip(c, v[:16])) < 1e-5, f"dimensions 16: {status} {str(cut)[:200]}")
    for bad, what in (({"input": ""}, "empty"), ({"input": []}, "'input'"), ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
                      ({"input": "x", "dimensions": 65}, "'dimensions'")):
        status, body = e.post("/v1/embeddings", bad)
        check(status == 400 and what in body["error"]["message"], f"/v1/embeddings {bad}: {status} {body}")
    status, body = e.post("/v1/completions", {"prompt": refs[0]["prompt"], "max_tokens": 64, "temperature": 0})
    check(status == 200 and body["choices"][0]["text"] == refs[0]["greedy_text"], f"greedy text on the embeddings server: {status} {str(body)[:200]}")
    check(e.stop() == 0, "the embeddings server exits 0")
    # Fill-in-the-middle on a synthetic model with DeepSeek V3's vocabulary (its FIM tokens):
    # /infill (llama.vim's and llama.vscode's request) and /v1/completions' suffix build
    # <fim_pre> prefix <fim_suf> suffix <fim_mid>, counted here from /tokenize.
    gguf_bin = os.path.join(os.path.dirname(os.path.abspath(server_bin)), "minfer-gguf")
    ds_vocab = f"{testdata}/vocab/ggml-vocab-deepseek-v3.gguf"
    if os.path.exists(gguf_bin) and os.path.exists(ds_vocab):
        fim_model = "/tmp/minfer-server-fim.gguf"
        subprocess.run([gguf_bin, "synth", "--arch", "qwen2", "--preset", "tiny", "--type", "q8_0", "--seed", "3", "--vocab", ds_vocab, "-o", fim_model],
                       check=True, capture_output=True, timeout=300)
        fs = HarnessServer(server_bin, config, fim_model, ["-np", "2", "-c", "2048"])
        servers.append(fs)

        def ntok(text):
            return len(fs.post("/tokenize", {"content": text})[1]["tokens"])

        bos = len(fs.post("/tokenize", {"content": "a", "add_special": True})[1]["tokens"]) - 1
        req = {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n\nprint(add(1, 2))\n", "prompt": "return",
               "input_extra": [{"filename": "util.py", "text": "X = 1\n"}], "n_predict": 8, "temperature": 0}
        want = bos + ntok("\n\n--- snippet ---\n\n") + ntok("X = 1\n") + ntok(req["input_prefix"]) + ntok("return") + ntok(req["input_suffix"]) + 3
        status, ib = fs.post("/infill", req)
        check(status == 200 and ib["tokens_evaluated"] == want and ib["tokens_predicted"] == 8 and isinstance(ib["content"], str),
              f"/infill: {status} {str(ib)[:300]} (want {want} prompt tokens)")
        print(f"/infill: {ib.get('tokens_evaluated')} prompt tokens (want {want}), {ib.get('content')!r}")
        status, _, events = fs.stream("/infill", dict(req, stream=True))
        pieces = [e for e in events if isinstance(e, dict)]
        check(status == 200 and pieces and pieces[-1]["stop"] is True and "".join(e["content"] for e in pieces) == ib["content"],
              f"/infill stream adds up: {str(events[-2:])[:300]}")
        status, cb = fs.post("/v1/completions", {"prompt": "def add(a, b):\n    ", "suffix": "\n", "max_tokens": 4, "temperature": 0})
        check(status == 200 and cb["usage"]["prompt_tokens"] == bos + ntok("def add(a, b):\n    ") + ntok("\n") + 3,
              f"/v1/completions with a suffix: {status} {str(cb)[:300]}")
        check(fs.stop() == 0, "the FIM server exits 0")
        os.remove(fim_model)
    # A bad server: section fails at start, naming the key.
    bad_cfg = "/tmp/minfer-server-bad.yaml"
    with open(bad_cfg, "w") as f:
        f.write(open(config).read() + "\nserver: {port: 70000}\n")
    p = subprocess.run([server_bin, "--config", bad_cfg], capture_output=True, timeout=60)
    check(p.returncode != 0 and b"'port' is 70000" in p.stderr, f"bad server: section: {p.returncode} {p.stderr[-300:]}")
finally:
    for sv in servers:
        sv.stop()

finish("server")
