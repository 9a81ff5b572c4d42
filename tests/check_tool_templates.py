#!/usr/bin/env python3
"""Tools through the real chat templates: every template of ../shared/testdata/templates that
reads `tools` renders a function-calling conversation (tools offered, an assistant tool call,
the tool's result) through `minfer-gguf template` exactly as Python's jinja2 renders it, set up
as transformers sets it up (the testdata README's environment, tools passed instead of None).
Exits 77 (skipped) without jinja2 or the test data.
    check_tool_templates.py GGUF_TOOL WORK_DIR
"""
import datetime
import json
import os
import subprocess
import sys

from checks import check, finish

tool, work = sys.argv[1], sys.argv[2]
td = "../shared/testdata/templates"
if not os.path.isdir(td):
    print("skip: ../shared/testdata not found")
    sys.exit(77)
try:
    import jinja2
    import jinja2.ext
    import jinja2.sandbox
except ImportError:
    print("skip: python3-jinja2 is not installed (the oracle these renderings are compared with)")
    sys.exit(77)
os.makedirs(work, exist_ok=True)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def jinja_render(source, variables):
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime(2026, 7, 26).strftime(fmt)
    return env.from_string(source).render(**variables)


# Keys deliberately out of alphabetical order: the schema must reach the template as written.
tools = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city now",
                                      "parameters": {"type": "object", "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                                                                                      "city": {"type": "string", "description": "City name"}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "description": "The local time in a time zone",
                                      "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}},
]
# Mistral's templates want nine-character alphanumeric call ids; Llama 3.1 one call a message.
call = {"id": "abc123def", "type": "function", "function": {"name": "get_weather", "arguments": {"unit": "celsius", "city": "Paris"}}}
conversations = {
    "offered": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "What is the weather in Paris?"}],
    "called": [{"role": "user", "content": "What is the weather in Paris?"},
               {"role": "assistant", "content": "", "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "abc123def", "name": "get_weather", "content": "{\"temperature\": 18, \"unit\": \"celsius\"}"}],
}

compared = 0
for name in sorted(f[:-len(".jinja")] for f in os.listdir(td) if f.endswith(".jinja")):
    source = open(os.path.join(td, name + ".jinja"), encoding="utf-8").read()
    if "tools" not in source:
        continue
    with open(os.path.join(td, name + ".cases.jsonl"), encoding="utf-8") as f:
        case = json.loads(f.readline())
    bos, eos = case["bos_token"], case["eos_token"]
    for label, messages in conversations.items():
        variables = {"messages": messages, "tools": tools, "add_generation_prompt": True, "bos_token": bos, "eos_token": eos}
        try:
            want, want_error = jinja_render(source, variables), None
        except Exception as e:  # the template refused this conversation: minfer must too
            want, want_error = None, str(e)
        path = os.path.join(work, f"{name}.{label}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"messages": messages, "tools": tools}, f, ensure_ascii=False)
        p = subprocess.run([tool, "template", "--template", os.path.join(td, name + ".jinja"), "--messages", path, "--bos", bos, "--eos", eos,
                            "--date", "2026-07-26"], capture_output=True, timeout=60)
        got, err = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
        if want_error is not None:
            check(p.returncode != 0 and want_error in err, f"{name} [{label}]: jinja2 raised '{want_error}'; minfer: rc {p.returncode}, {err.strip()[:300]}")
            continue
        compared += 1
        if p.returncode != 0:
            check(False, f"{name} [{label}]: minfer-gguf template failed: {err.strip()[:400]}")
            continue
        if got != want:
            at = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
            check(False, f"{name} [{label}]: differs from jinja2 at byte {at}:\n  minfer: {got[max(0, at - 80):at + 80]!r}\n  jinja2: {want[max(0, at - 80):at + 80]!r}")
check(compared >= 10, f"only {compared} renderings compared (the tool-taking templates of the test data give more)")
print(f"{compared} tool conversations rendered as jinja2 renders them")
finish("tool_templates")
