export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
B=.gpu/build/bin
$B/minfer-gguf synth --arch qwen2 --preset 0.5b --type q4_0 --seed 1 --vocab .gpu/testdata/vocab/ggml-vocab-qwen2.gguf -o /tmp/q.gguf > /dev/null 2>&1
# A long prompt (WORDS words, ~3 tokens each) so the prefill step is the size the benchmark uses.
PROMPT=$(python3 -c "print(' '.join('word%d' % i for i in range(${WORDS:-170})))")
printf 'backends: {cuda: {}}\nprompt: "%s"\ncontext: 2048\ngeneration: {n_predict: 8, temperature: 0}\n' "$PROMPT" > /tmp/c.yaml
MINFER_TRACE=$OUT/trace.json $B/minfer-app --config /tmp/c.yaml -m /tmp/q.gguf > /dev/null 2>&1
python3 - <<'PY'
import json, os, collections
t = json.load(open(os.environ["OUT"] + "/trace.json"))
nodes = t["graph"]["nodes"]
for si in (0, 3):
    s = t["steps"][si]
    by_op = collections.Counter()
    for r in s["nodes"]: by_op[nodes[r["id"]]["op"]] += r["ms"]
    tot = sum(r["ms"] for r in s["nodes"])
    print(f"step {si} ({s['kind']}, {s['n_tokens']} tok): nodes {tot:.2f} ms, step total {s['total_ms']:.2f} ms")
    for op, ms in by_op.most_common(12): print(f"   {op:12s} {ms:8.3f} ms")
    slow = sorted(s["nodes"], key=lambda r: -r["ms"])[:8]
    print("   slowest:", [(nodes[r["id"]]["name"], round(r["ms"], 3)) for r in slow])
PY
if command -v nsys > /dev/null; then echo "nsys available"; fi
if command -v ncu > /dev/null; then echo "ncu available"; fi
