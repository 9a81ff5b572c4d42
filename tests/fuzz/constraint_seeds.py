"""Seeds for the grammar and schema fuzz targets: a constraint, a line "%%", then a reply.
   python3 tests/fuzz/constraint_seeds.py grammar|schema DIR"""
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

kind, out = sys.argv[1], sys.argv[2]
items = GRAMMARS if kind == "grammar" else [(json.dumps(s), r) for s, r in SCHEMAS]
for i, (constraint, reply) in enumerate(items):
    with open(os.path.join(out, f"{kind[0]}{i}"), "w", encoding="utf-8") as f:
        f.write(constraint + "\n%%\n" + reply)
