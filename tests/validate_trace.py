#!/usr/bin/env python3
"""Validates a minfer trace against docs/trace.schema.json (the subset of JSON Schema it uses:
type, enum, required, properties, items, minimum, maximum), then checks what the schema cannot
say: ids in range, grids of rows x cols values, one record per node per step, probabilities.

    validate_trace.py SCHEMA TRACE      (exit 0 when valid; prints every problem otherwise)
"""
import json
import sys

TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def is_type(v, t):
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return isinstance(v, TYPES[t])


def check(v, s, path, errors):
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(is_type(v, t) for t in types):
            errors.append(f"{path}: {json.dumps(v)[:60]} is not {types}")
            return
    if "enum" in s and v not in s["enum"]:
        errors.append(f"{path}: {v!r} not in {s['enum']}")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if "minimum" in s and v < s["minimum"]:
            errors.append(f"{path}: {v} < {s['minimum']}")
        if "maximum" in s and v > s["maximum"]:
            errors.append(f"{path}: {v} > {s['maximum']}")
    if isinstance(v, dict):
        for k in s.get("required", []):
            if k not in v:
                errors.append(f"{path}: missing '{k}'")
        for k, sub in s.get("properties", {}).items():
            if k in v:
                check(v[k], sub, f"{path}.{k}", errors)
    if isinstance(v, list) and "items" in s:
        for i, x in enumerate(v):
            check(x, s["items"], f"{path}[{i}]", errors)


def main():
    schema = json.load(open(sys.argv[1]))
    trace = json.load(open(sys.argv[2]))
    errors = []
    check(trace, schema, "trace", errors)
    if not errors:
        nodes = trace["graph"]["nodes"]
        for i, n in enumerate(nodes):
            if n["id"] != i:
                errors.append(f"graph.nodes[{i}].id is {n['id']}")
        for s in trace["steps"]:
            ids = [r["id"] for r in s["nodes"]]
            if sorted(ids) != list(range(len(nodes))):
                errors.append(f"step {s['index']}: node records {len(ids)} do not cover the {len(nodes)} nodes once each")
            for r in s["nodes"]:
                g = r.get("grid")
                if g and len(g["values"]) != g["rows"] * g["cols"]:
                    errors.append(f"step {s['index']} node {r['id']}: grid has {len(g['values'])} values, not {g['rows']}x{g['cols']}")
                if g and (g["rows"] > trace["caps"]["grid"] or g["cols"] > trace["caps"]["grid"]):
                    errors.append(f"step {s['index']} node {r['id']}: grid larger than the cap")
            if "sample" in s and s["sample"]["chosen"] not in [c["id"] for c in s["sample"]["top"]]:
                errors.append(f"step {s['index']}: the chosen token is not among the listed ones")
        if len(trace["steps"]) > trace["caps"]["max_steps"]:
            errors.append("more steps than max_steps")
    for e in errors[:50]:
        print("INVALID:", e)
    if errors:
        sys.exit(1)
    print(f"trace valid: {len(trace['graph']['nodes'])} nodes, {len(trace['steps'])} steps")


if __name__ == "__main__":
    main()
