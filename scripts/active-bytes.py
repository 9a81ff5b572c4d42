#!/usr/bin/env python3
"""Bytes of weights one decode token reads, from `minfer-gguf info FILE --json` on stdin:
every tensor whole, but a mixture-of-experts layer's ffn_*_exps only for the expert_used_count
of expert_count experts, and the token embedding only for its one row (unless it is also the
output projection, with no output.weight). Prints the total and its parts, or with --bytes
the total alone, in bytes (for scripts).
   minfer-gguf info MODEL.gguf --json | python3 scripts/active-bytes.py [--bytes]"""
import json
import sys

d = json.load(sys.stdin)
arch = d["architecture"]
meta = d["metadata"]
def key(k):
    v = meta.get(f"{arch}.{k}")
    return v["value"] if isinstance(v, dict) and "value" in v else v
n_expert, n_used = key("expert_count") or 0, key("expert_used_count") or 0
names = {t["name"] for t in d["tensors"]}
parts = {"experts": 0, "embedding row": 0, "output": 0, "attention and the rest": 0}
for t in d["tensors"]:
    n, b = t["name"], t["bytes"]
    if n.endswith("_exps.weight") and n_expert:
        parts["experts"] += b * n_used / n_expert
    elif n == "token_embd.weight":
        if "output.weight" in names:
            parts["embedding row"] += b / t["dims"][1]
        else:
            parts["output"] += b
    elif n == "output.weight":
        parts["output"] += b
    else:
        parts["attention and the rest"] += b
total = sum(parts.values())
if "--bytes" in sys.argv[1:]:
    print(round(total))
    sys.exit(0)
print(f"active bytes per token: {total / 1e9:.3f} GB (" + ", ".join(f"{k} {v / 1e9:.3f}" for k, v in parts.items()) +
      f"; {n_used} of {n_expert} experts)" if n_expert else f"active bytes per token: {total / 1e9:.3f} GB (dense)")
