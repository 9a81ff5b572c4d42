#!/usr/bin/env python3
"""Clients no one here wrote, against a real minfer-server (stories260K, a real chat template,
an API key): OpenAI's Node client chats, streams, completes, lists models and sees a 400 as its
error; Anthropic's Node client sends a message, streams it, counts tokens, forces a tool call
and sees a 400 as its error; the chat page at "/" in headless Chromium (playwright-core) streams an answer equal to
the API's, shows its speed, and its Stop button ends a long answer and frees the slot.
    check_server_clients.py SERVER NODE_DIR SHOT_DIR [CONFIG]      (run from the repository root)
Exit 77 (a skip) when NODE_DIR has no node_modules: scripts/setup.sh installs them there."""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import Server, check, finish, metric  # noqa: E402

server_bin, node_dir, shot_dir = sys.argv[1:4]
base_config = sys.argv[4] if len(sys.argv) > 4 else "configs/cpu.yaml"
testdata = "../shared/testdata"
stories = f"{testdata}/models/stories260K.gguf"
template = f"{testdata}/templates/Qwen-Qwen2.5-7B-Instruct.jinja"
scripts = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")
for need, what in [(stories, "stories260K"), (template, "the Qwen2.5 chat template")]:
    if not os.path.exists(need):
        print(f"SKIP: {what} ({need}) not found")
        sys.exit(77)
for pkg in ["openai", "playwright-core", "@anthropic-ai/sdk"]:
    if not os.path.isdir(os.path.join(node_dir, "node_modules", pkg)):
        print(f"SKIP: {node_dir}/node_modules/{pkg} is missing: run scripts/setup.sh (it runs npm ci there)")
        sys.exit(77)
if not os.path.exists("/usr/bin/chromium"):
    print("SKIP: /usr/bin/chromium is missing (scripts/setup.sh installs Debian's chromium)")
    sys.exit(77)



def node(script, *args):
    env = dict(os.environ, NODE_PATH=os.path.join(node_dir, "node_modules"))
    # ESM ignores NODE_PATH: run the script from a copy inside NODE_DIR so its imports resolve there.
    local = os.path.join(node_dir, script)
    with open(os.path.join(scripts, script)) as src, open(local, "w") as dst:
        dst.write(src.read())
    p = subprocess.run(["node", local, *args], capture_output=True, text=True, timeout=180, env=env)
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        check(False, f"{script} printed no result (rc {p.returncode}): {p.stdout[-500:]} {p.stderr[-1500:]}")
        return {}


os.makedirs(shot_dir, exist_ok=True)
cfg = os.path.join(shot_dir, "chat.yaml")
with open(cfg, "w") as f:
    kept = [line for line in open(base_config).read().splitlines() if not line.startswith("chat:")]
    f.write("\n".join(kept) + f"\nchat_template: {os.path.abspath(template)}\nserver: {{api_key: sekret, alias: chatty, embeddings: true}}\n")
s = None
try:
    s = Server(server_bin, cfg, stories, ["-np", "2"])
    base = f"http://127.0.0.1:{s.port}"
    auth = {"Content-Type": "application/json", "Authorization": "Bearer sekret"}
    msgs = [{"role": "user", "content": "Once upon"}]
    status, want = s.request("POST", "/v1/chat/completions", json.dumps({"messages": msgs, "max_tokens": 16, "temperature": 0}), headers=auth)
    check(status == 200, f"the reference chat: {status} {want}")
    want_text = want["choices"][0]["message"]["content"]
    status, want_c = s.request("POST", "/v1/completions", json.dumps({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}), headers=auth)

    r = node("openai_client.mjs", base, "sekret", "chatty")
    print("openai client:", json.dumps(r)[:600])
    print("openai client, responses:", json.dumps({k: v for k, v in r.items() if k.startswith("responses")})[:600], r.get("responses_stream", {}).get("text"))
    if r:
        check(r["chat"]["content"] == want_text and r["chat"]["role"] == "assistant" and r["chat"]["object"] == "chat.completion"
              and r["chat"]["usage"]["completion_tokens"] == want["usage"]["completion_tokens"], "the client's chat is the API's answer")
        check(r["stream"]["content"] == want_text and r["stream"]["ids"] == 1 and r["stream"]["role"] == "assistant" and
              r["stream"]["finish_reason"] == want["choices"][0]["finish_reason"] and r["stream"]["usage"] == r["chat"]["usage"],
              "the client's stream adds up to the same answer, one id, the finish reason and the usage")
        check(r["completion"]["text"] == want_c["choices"][0]["text"], "the client's legacy completion")
        check(r["models"] == ["chatty"], "the client's model list")
        check(r.get("model") == "chatty" and isinstance(r.get("other_model"), dict) and r["other_model"]["status"] == 404 and
              "chatty" in r["other_model"]["message"], f"the client retrieves the model, and another is a 404 naming this one: {r.get('other_model')}")
        status, want_e = s.request("POST", "/v1/embeddings", json.dumps({"input": ["Once upon", "a time"]}), headers=auth)
        got_e = r.get("embeddings", {}).get("data", [])
        check(status == 200 and len(got_e) == 2 and all(g["index"] == w["index"] and len(g["embedding"]) == len(w["embedding"]) and
                                                       max(abs(a - b) for a, b in zip(g["embedding"], w["embedding"])) < 1e-6
                                                       for g, w in zip(got_e, want_e["data"])),
              "the client's embeddings (base64, decoded by it) are the API's floats")
        check(isinstance(r["error"], dict) and r["error"]["status"] == 400 and "messages" in r["error"]["message"],
              "the client sees a 400 naming the field")
        rr, rs = r.get("responses", {}), r.get("responses_stream", {})
        want_finish = want["choices"][0]["finish_reason"]
        check(rr.get("object") == "response" and rr.get("text") == want_text and rr.get("types") == ["message"] and
              rr.get("status") == ("incomplete" if want_finish == "length" else "completed") and
              rr.get("usage", {}).get("output_tokens") == want["usage"]["completion_tokens"],
              "the client's /v1/responses answer is the chat's (output_text, status, usage)")
        check(rs.get("text") == want_text and rs.get("deltas") == want_text and rs.get("sequence") == list(range(len(rs.get("types", [])))) and
              rs.get("types", [None])[0] == "response.created" and rs["types"][-1] in ("response.completed", "response.incomplete") and
              rs.get("last", {}).get("usage") == rr.get("usage") and rs["last"].get("status") == rr.get("status") and rs.get("kept") == want_text,
              "the client's accumulated /v1/responses stream: the same text, numbered events, the same usage, kept whole")
        rc = r.get("responses_call", [])
        check(len(rc) == 1 and rc[0]["type"] == "function_call" and rc[0]["name"] == "get_time" and rc[0]["call_id"] and
              json.loads(rc[0]["arguments"]).get("zone") in ("UTC", "CET"),
              "a forced call through /v1/responses is a function_call item with JSON arguments")
        ra = r.get("responses_after", {})
        check(ra.get("types") == ["message"] and ra.get("input_tokens", 0) > 0, "the call and its output go back as input items")
        # previous_response_id: the same prompt as the chat with the whole conversation.
        status, want_next = s.request("POST", "/v1/chat/completions", json.dumps({"messages": msgs + [{"role": "assistant", "content": want_text},
                                      {"role": "user", "content": "And then?"}], "max_tokens": 8, "temperature": 0}), headers=auth)
        rn = r.get("responses_next", {})
        check(status == 200 and rn.get("input_tokens") == want_next["usage"]["prompt_tokens"] and
              rn.get("text") == want_next["choices"][0]["message"]["content"] and rn.get("previous") == rr.get("id"),
              f"a response continued by previous_response_id is the chat over the whole conversation: {rn} against {str(want_next)[:300]}")
        items = r.get("responses_input_items", [])
        check([i["type"] for i in items] == ["message", "function_call", "function_call_output"] and items[0]["role"] == "user" and
              all(i.get("id") for i in items), f"the client lists a kept response's input items: {items}")
        check(r.get("responses_retrieved") == {"id": rr.get("id"), "text": want_text, "status": rr.get("status")}, "the client retrieves the kept response")
        gone_r, gone_c = r.get("responses_deleted_retrieve"), r.get("responses_deleted_continue")
        check(isinstance(gone_r, dict) and gone_r["status"] == 404 and "is kept here" in gone_r["message"] and isinstance(gone_c, dict) and gone_c["status"] == 400 and
              "previous_response_id" in gone_c["message"], f"a deleted response is gone: {gone_r} {gone_c}")

    a = node("anthropic_client.mjs", base, "sekret", "chatty")
    print("anthropic client:", json.dumps(a)[:600])
    if a:
        check(a["message"]["type"] == "message" and a["message"]["role"] == "assistant" and a["message"]["content"] == [{"type": "text", "text": want_text}]
              and a["message"]["usage"]["output_tokens"] == want["usage"]["completion_tokens"], "the Anthropic client's message is the chat's answer")
        check(a["stream"]["text"] == want_text and a["stream"]["content"] == a["message"]["content"] and a["stream"]["stop_reason"] == a["message"]["stop_reason"]
              and a["stream"]["output_tokens"] == want["usage"]["completion_tokens"], "the Anthropic client's stream assembles the same message")
        check(a["count"] == want["usage"]["prompt_tokens"], f"the Anthropic client's token count: {a['count']}")
        check(a["tool"]["stop_reason"] == "tool_use" and a["tool"]["last"]["type"] == "tool_use" and a["tool"]["last"]["name"] == "get_time"
              and a["tool"]["last"]["input"] == {}, f"the Anthropic client's forced tool call: {a['tool']}")
        check(a["tool_stream"]["stop_reason"] == "tool_use" and a["tool_stream"]["last"]["type"] == "tool_use" and a["tool_stream"]["last"]["name"] == "get_time"
              and a["tool_stream"]["last"]["input"] == {}, f"the Anthropic client assembles the streamed tool call: {a['tool_stream']}")
        check(isinstance(a["error"], dict) and a["error"]["status"] == 400 and a["error"]["type"] == "invalid_request_error",
              f"the Anthropic client sees a 400: {a['error']}")

    shot = os.path.abspath(os.path.join(shot_dir, "chat-page.png"))
    page = node("chat_page.mjs", base, "sekret", shot)
    print("chat page:", json.dumps(page)[:600])
    if page:
        check("exception" not in page, f"the page test ran: {page.get('exception')}")
        check("chatty" in page.get("header", ""), f"the header names the model: {page.get('header')}")
        check(page.get("answer") == want_text, f"the page's answer {page.get('answer')!r} is the API's {want_text!r}")
        sp = page.get("speed", "")
        check(f"{want['usage']['completion_tokens']} tokens" in sp and "tok/s" in sp and "first token" in sp, f"the answer's speed line: {sp!r}")
        check(page.get("stop_enabled_while_running") and "stopped" in (page.get("stopped_speed") or "") and
              page.get("send_enabled_after") and not page.get("stop_enabled_after"), f"Stop ends the answer: {page}")
        check(not page.get("errors"), f"no errors on the page: {page.get('errors')}")
        check(os.path.getsize(shot) > 1000 if os.path.exists(shot) else False, "a screenshot")
    def idle():
        return metric(s, "requests_processing", headers=auth) == 0 and metric(s, "kv_pages_used", headers=auth) == 0

    deadline = time.time() + 20
    while time.time() < deadline and not idle():
        time.sleep(0.1)
    check(idle(), "the stopped answer's slot and pages are free")
finally:
    if s:
        s.stop()

finish("server clients")
