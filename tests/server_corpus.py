"""Malformed, truncated, huge, wrongly typed and hostile requests for minfer-server, each with
the statuses it may get (None: the server may also just close the connection). Shared by
tests/check_server_corpus.py and scripts/server-soak.py. Every socket has a timeout."""
import json
import socket

GEN = "/v1/completions"
CHAT = "/v1/chat/completions"


def _req(method, path, body=b"", headers=None, version="HTTP/1.1"):
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    h = {"Host": "127.0.0.1", "Content-Type": "application/json", "Content-Length": str(len(body)), "Connection": "close"}
    h.update(headers or {})
    head = f"{method} {path} {version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items() if v is not None) + "\r\n"
    return head.encode("latin-1") + body


def _json(path, obj):
    return _req("POST", path, json.dumps(obj))


def cases():
    """(name, raw request bytes, allowed statuses, half_close) in a fixed order; half_close: the
    client sends no more after these bytes (a body shorter than its length, then EOF)."""
    c = []
    bad_json = ["", "null", "[]", "123", '"text"', "{", '{"prompt": ', '{"prompt": "x"', '{"prompt": "x",}', "{'prompt': 'x'}",
                '{"prompt": "x"} trailing', '{"prompt": NaN}', '{"prompt": "\\ud800"}', "[" * 100000 + "]" * 100000,
                '{"a":' * 50000 + "1" + "}" * 50000, "\x00\x01\x02", '{"prompt": "x", "prompt": 5}']
    for i, b in enumerate(bad_json):
        c.append((f"bad json {i} ({b[:20]!r})", _req("POST", GEN, b), {400}))
        c.append((f"bad json chat {i}", _req("POST", CHAT, b), {400}))
    c.append(("invalid utf-8 in a string", _req("POST", GEN, b'{"prompt": "\xff\xfe"}'), {400}))
    wrong = [{"prompt": 5}, {"prompt": {}}, {"prompt": [[1, -2]]}, {"prompt": [-1]}, {"prompt": [1e10]}, {"prompt": [1.5]},
             {"prompt": [True]}, {"prompt": ["a", 5]}, {"prompt": ["x"] * 65}, {"prompt": "x", "max_tokens": "5"}, {"prompt": "x", "max_tokens": -1},
             {"prompt": "x", "max_tokens": 1e309}, {"prompt": "x", "max_tokens": 2 ** 70}, {"prompt": "x", "temperature": "hot"},
             {"prompt": "x", "temperature": 1e308}, {"prompt": "x", "top_k": 1.5}, {"prompt": "x", "top_p": -0.1},
             {"prompt": "x", "seed": 1e30}, {"prompt": "x", "seed": "s"}, {"prompt": "x", "stop": [None]}, {"prompt": "x", "stop": ["a"] * 100},
             {"prompt": "x", "stream": "yes"}, {"prompt": "x", "stream_options": 1}, {"prompt": "x", "n": 0}, {"prompt": "x", "logprobs": "x"},
             {"prompt": "x", "logprobs": 100}, {"prompt": "x", "min_p": [0.1]}, {"prompt": "x", "repeat_penalty": 0},
             {"prompt": "x", "presence_penalty": 9}, {"prompt": "x", "repeat_last_n": -5}, {"prompt": "x", "response_format": "json"},
             {"prompt": "x " * 200000}, {"prompt": "a" * 8000000}, {"prompt": list(range(100000))}]
    for i, b in enumerate(wrong):
        c.append((f"wrong field {i} ({json.dumps(b)[:40]})", _json(GEN, b), {400}))
    msgs = [{"messages": "hi"}, {"messages": [1]}, {"messages": [{"role": 1, "content": "x"}]}, {"messages": [{"content": "x"}]},
            {"messages": [{"role": "user", "content": {"a": 1}}]}, {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}, {"messages": []}, {"messages": None},
            {"messages": [{"role": "user", "content": "y" * 6000000}]}, {"messages": [{"role": "user", "content": "x"}] * 20000}]
    for i, b in enumerate(msgs):
        c.append((f"wrong messages {i} ({json.dumps(b)[:40]})", _json(CHAT, b), {400}))
    # Constrained decoding: schemas and patterns nested past any sane depth, a schema that
    # admits nothing, tools whose parameters are nested as deep.
    deep = '{"type": "object", "properties": {"a": ' * 60000 + "{}" + "}}" * 60000
    c.append(("a schema nested 60000 deep", _req("POST", GEN, '{"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": '
                                                 + deep + "}}}"), {400}))
    c.append(("a pattern of 60000 groups", _json(GEN, {"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {
        "schema": {"type": "string", "pattern": "(" * 60000 + ")" * 60000}}}}), {400}))
    for i, schema in enumerate([{"$ref": "#"}, {"anyOf": [{"$ref": "#"}]}, {"type": "object", "properties": {"a": {"$ref": "#/properties/a"}}, "required": ["a"]},
                                {"type": "array", "items": {"$ref": "#"}, "minItems": 1}]):
        c.append((f"a schema that admits no value {i}", _json(GEN, {"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}),
                  {400}))
    deep_params = '{"type": "object", "properties": {"a": ' * 60000 + "{}" + "}}" * 60000
    c.append(("tools with parameters nested 60000 deep", _req("POST", CHAT, '{"messages": [{"role": "user", "content": "x"}], "tool_choice": "required", '
                                                             '"tools": [{"type": "function", "function": {"name": "f", "parameters": ' + deep_params + "}}]}"),
              {400}))
    # The other APIs' endpoints: Anthropic's, llama-server's, embeddings.
    for path in ("/v1/messages", "/completion", "/infill", "/v1/embeddings", "/v1/messages/count_tokens", "/v1/responses"):
        for i, b in enumerate(["", "null", "[]", "{", '{"a":' * 50000 + "1" + "}" * 50000, "\x00"]):
            c.append((f"bad json {path} {i}", _req("POST", path, b), {400}))
    anthropic = [{"messages": "hi"}, {"messages": [{"role": "user", "content": [{"type": "image"}]}]}, {"messages": [{"role": "tool", "content": "x"}]},
                 {"messages": [{"role": "user", "content": "x"}], "tools": [{"name": 5}]}, {"messages": [{"role": "user", "content": "x"}], "tool_choice": "any"},
                 {"messages": [{"role": "user", "content": "x"}], "system": 5}, {"messages": [{"role": "user", "content": [{"type": "tool_result", "content": 5}]}]},
                 {"messages": [{"role": "user", "content": "x"}], "max_tokens": -3}, {"messages": [{"role": "user", "content": "x"}], "stop_sequences": [1]}]
    for i, b in enumerate(anthropic):
        c.append((f"wrong anthropic {i} ({json.dumps(b)[:40]})", _json("/v1/messages", b), {400}))
    responses = [{"input": 5}, {"input": []}, {"input": [5]}, {"input": [{"role": "tool", "content": "x"}]}, {"input": [{"type": "function_call"}]},
                 {"input": [{"type": "function_call", "name": "f", "call_id": "c", "arguments": {"a": 1}}]},
                 {"input": [{"type": "function_call_output", "call_id": 5}]}, {"input": [{"role": "user", "content": [{"type": "input_file"}]}]},
                 {"input": "x", "instructions": 5}, {"input": "x", "tools": [{"type": "function"}]}, {"input": "x", "tools": {}},
                 {"input": "x", "tool_choice": {"type": "mcp"}}, {"input": "x", "text": {"format": {"type": "xml"}}},
                 {"input": "x", "max_output_tokens": -3}, {"input": "x", "temperature": "hot"}, {"input": "x", "previous_response_id": "resp_1"},
                 {"input": "x", "background": True}, {"input": "x", "top_logprobs": 3},
                 {"input": "x", "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "nope"}}}},
                 {"input": "x", "tool_choice": "required"}]
    for i, b in enumerate(responses):
        c.append((f"wrong responses {i} ({json.dumps(b)[:40]})", _json("/v1/responses", b), {400}))
    native = [{"prompt": "x", "n_predict": -7}, {"prompt": "x", "grammar": "root ::= x"}, {"prompt": "x", "logit_bias": [[1]]}, {"prompt": 5},
              {"prompt": "x", "n_probs": 50}, {"prompt": "x", "n_probs": "5"}, {"prompt": "x", "post_sampling_probs": True, "n_probs": 2},
              {"prompt": "x", "json_schema": {"type": "nope"}}]
    # Broken grammars: each a 400 naming where, never a crash or a hang.
    native += [{"prompt": "x", "grammar": g} for g in ["root ::= [", "root ::= \"\\u12\"", "root ::= \"a\"{1001}", "root ::= (\"a\"", "root ::= a\na ::= a",
                                                      "root ::= \"\\xZZ\"", "root ::= [z-a]", "::= \"a\"", "root ::= \"a\" )"]]
    for i, b in enumerate(native):
        c.append((f"wrong /completion {i} ({json.dumps(b)[:40]})", _json("/completion", b), {400}))
    c.append(("/infill with a numeric prefix", _json("/infill", {"input_prefix": 5}), {400}))
    c.append(("/infill with bad extra", _json("/infill", {"input_prefix": "x", "input_extra": [1]}), {400}))
    embeds = [{"input": 5}, {"input": []}, {"input": [[]]}, {"input": ""}, {"input": ["x"] * 3000}, {"input": [2 ** 40]}, {"input": "x", "dimensions": 0},
              {"input": "x", "encoding_format": "hex"}, {"input": [[1, "a"]]}, {"input": "x " * 200000}]
    for i, b in enumerate(embeds):
        c.append((f"wrong embeddings {i} ({json.dumps(b)[:40]})", _json("/v1/embeddings", b), {400}))
    c.append(("tokenize without content", _json("/tokenize", {"text": 1}), {400}))
    c.append(("detokenize huge id", _json("/detokenize", {"tokens": [2 ** 40]}), {400}))
    c.append(("detokenize not a list", _json("/detokenize", {"tokens": "abc"}), {400}))
    # HTTP itself.
    c.append(("garbage request line", b"GARBAGE\r\n\r\n", {400, None}))
    c.append(("no request line", b"\r\n\r\n", {400, None}))
    c.append(("http/0.9", b"GET /\r\n", {400, None}))
    c.append(("unknown method", _req("BREW", "/health"), {400, 404, 405, None}))
    c.append(("path traversal", _req("GET", "/../../etc/passwd"), {400, 404}))
    c.append(("nul in the path", _req("GET", "/health%00.txt"), {400, 404}))
    c.append(("a 100 KB path", _req("GET", "/" + "a" * 100000), {400, 404, 414, None}))
    c.append(("a 100 KB header", _req("GET", "/health", headers={"X-Big": "b" * 100000}), {400, 431, None}))
    c.append(("10000 headers", _req("GET", "/health", headers={f"X-H{i}": "v" for i in range(10000)}), {200, 400, 431, None}))
    t = []  # truncated: sent with half_close
    t.append(("negative length", _req("POST", GEN, b'{"prompt":"x"}', headers={"Content-Length": "-1"}), {400, 413, None}))
    t.append(("absurd length", _req("POST", GEN, b'{"prompt":"x"}', headers={"Content-Length": "99999999999999999999"}), {400, 413, None}))
    t.append(("length past the body", _req("POST", GEN, b'{"prompt":"x"}', headers={"Content-Length": "100"}), {400, None}))
    t.append(("bad chunked body", _req("POST", GEN, b"zz\r\nabc\r\n0\r\n\r\n", headers={"Content-Length": None, "Transfer-Encoding": "chunked"}),
              {400, None}))
    c = [x + (False,) for x in c] + [x + (True,) for x in t]
    c.append(("a 20 MiB body", _req("POST", GEN, b"{" + b" " * (20 << 20) + b"}"), {413, None}))
    c.append(("bad auth header", _req("GET", "/props", headers={"Authorization": "Bearer " + "\x7f" * 1000}), {200, 401}))
    c.append(("get with a body", _req("GET", "/health", b"x" * 1000), {200, 400}))
    return [x + (False,) if len(x) == 3 else x for x in c]


def send(port, raw, timeout=30, half_close=False):
    """Sends raw bytes on a fresh connection; the response's status, or None when the server
    closed without one. Raises on timeout (a stalled server)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(raw)
            if half_close:
                s.shutdown(socket.SHUT_WR)  # a truncated request ends here, as when a client goes away
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server refused part way (a body over its limit): what it said is below
        data = b""
        while b"\r\n" not in data:
            try:
                chunk = s.recv(4096)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
        if not data.startswith(b"HTTP/1."):
            return None
        return int(data.split(b" ", 2)[1])
    finally:
        s.close()
