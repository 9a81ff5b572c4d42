"""Seeds for the grammar, schema and request fuzz targets (scripts/fuzz.sh): a constraint, a
line "%%", then a reply; or a request body.
   python3 tests/fuzz/fuzz_seeds.py grammar|schema|request DIR"""
import json
import os
import sys

GRAMMARS = [
    ('root ::= "yes" | "no"', 'yes'),
    ('root ::= [a-z]+ ("," [a-z]+)*', 'ab,cd'),
    ('root ::= object\nobject ::= "{" ws (pair ("," ws pair)*)? "}"\npair ::= str ":" ws value\n'
     'str ::= "\\"" [^"\\\\]* "\\""\nvalue ::= str | [0-9]+ | object\nws ::= [ \\t\\n]*', '{"a": 1}'),
    ('root ::= ("a" | "b"){2,5} [\\u00e9-\\u00ff]? .', 'ab\u00e9z'),
    ('root ::= item{1,3}\nitem ::= "x" [0-9]{0,2} # a comment', 'x12x'),
]
SCHEMAS = [
    ({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer", "minimum": 0}},
      "required": ["name"]}, '{"name": "Al", "age": 3}'),
    ({"type": "array", "items": {"enum": ["a", "b", 3]}, "minItems": 1, "uniqueItems": True}, '["a", 3]'),
    ({"anyOf": [{"type": "number", "multipleOf": 0.25}, {"type": "string", "pattern": "^[a-z]{2,4}\\d?$"}]}, '"abc1"'),
    ({"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"}, '{"next": {}}'),
    ({"type": "string", "format": "date-time"}, '"2026-12-05T10:00:00Z"'),
]

REQUESTS = [
    {"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
     "max_tokens": 16, "temperature": 0.5, "top_p": 0.9, "stop": ["\n", "END"], "n": 2, "seed": 3, "logprobs": True, "top_logprobs": 3,
     "stream": True, "stream_options": {"include_usage": True}},
    {"messages": [{"role": "user", "content": "weather?"},
                  {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get", "arguments": "{\"city\": \"Paris\"}"}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
     "tools": [{"type": "function", "function": {"name": "get", "description": "d",
                                                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
     "tool_choice": "required", "parallel_tool_calls": False},
    {"messages": [{"role": "user", "content": "x"}],
     "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}, "strict": True}},
     "logit_bias": {"15": -100}, "presence_penalty": 0.5, "frequency_penalty": 0.2, "max_completion_tokens": 40,
     "chat_template_kwargs": {"enable_thinking": False}, "reasoning_effort": "low"},
    {"prompt": ["a", "b"], "max_tokens": 5, "echo": True, "logprobs": 2, "best_of": 1, "suffix": None, "grammar": "root ::= \"yes\"", "mirostat": 2,
     "dry_multiplier": 0.8, "xtc_probability": 0.5, "typical_p": 0.9, "top_n_sigma": 1.0, "min_tokens": 2, "ignore_eos": True,
     "stop_token_ids": [1, 2], "repetition_penalty": 1.1},
    {"prompt": [[1, 2, 3], [4, 5]], "n": 3},
    {"input": ["hello", "world"], "encoding_format": "base64", "dimensions": 8},
]

kind, out = sys.argv[1], sys.argv[2]
if kind == "request":
    items = [json.dumps(r) for r in REQUESTS]
else:
    items = [c + "\n%%\n" + r for c, r in (GRAMMARS if kind == "grammar" else [(json.dumps(s), r) for s, r in SCHEMAS])]
for i, text in enumerate(items):
    with open(os.path.join(out, f"{kind[0]}{i}"), "w", encoding="utf-8") as f:
        f.write(text)
