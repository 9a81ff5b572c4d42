#!/usr/bin/env bash
# Issue 17's GPU figure, from a bundle: minfer-server on the CUDA backend under N streaming
# clients, against minfer-bench --parallel N over the same work, on the same machine.
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64; bash scripts/gpu-server-load.sh .gpu OUTDIR
# CLIENTS (64), REQUESTS (2 per client), NPP (512), NTG (128), BATCH (8192: the bench's step
# size for this work), PRESET (7b). The server's aggregate generated tok/s is set against the
# bench's S_GEN (B * TG / T: generated tokens per second of a run that also reads every prompt)
# and its S_TG (decode only, after every prompt was read).
set -uo pipefail
bundle=${1:-.gpu}; out=${2:-/tmp/minfer-server-load}; mkdir -p "$out"
bin=$bundle/build/bin
clients=${CLIENTS:-64}; requests=${REQUESTS:-2}; npp=${NPP:-512}; ntg=${NTG:-128}; batch=${BATCH:-8192}; preset=${PRESET:-7b}
model=/tmp/minfer-models/qwen2-$preset-q4_0.gguf; mkdir -p /tmp/minfer-models
[ -f "$model" ] || "$bin/minfer-gguf" synth --arch qwen2 --preset "$preset" --type q4_0 --seed 1 \
  --vocab "$bundle/testdata/vocab/ggml-vocab-qwen2.gguf" -o "$model" > "$out/synth.log" 2>&1
printf 'backends: {cuda: {}}\nbatch: %s\ncontext: %s\n' "$batch" "$((npp + ntg + 16))" > "$out/cuda.yaml"
"$bin/minfer-server" --config "$out/cuda.yaml" -m "$model" --port 0 -np "$clients" > "$out/server.out" 2> "$out/server.err" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT
port=""
for _ in $(seq 1 600); do
  port=$(sed -n 's|^minfer-server listening on http://127.0.0.1:\([0-9]*\)$|\1|p' "$out/server.out")
  [ -n "$port" ] && python3 -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:$port/health').status == 200 else 1)" 2>/dev/null && break
  kill -0 $server 2>/dev/null || { echo "the server died:"; tail -20 "$out/server.err"; exit 1; }
  sleep 0.5
done
# Round 1 warms the server (CUDA Graphs per batch size, scratch); round 2 is the figure.
python3 scripts/server-load.py --port "$port" -n "$clients" -m 1 --prompt-tokens "$npp" --max-tokens "$ntg" --vocab 150000 > "$out/warm.txt" 2>&1
python3 scripts/server-load.py --port "$port" -n "$clients" -m "$requests" --prompt-tokens "$npp" --max-tokens "$ntg" --vocab 150000 | tee "$out/load.txt"
curl -s "http://127.0.0.1:$port/metrics" 2>/dev/null | grep -E '^minfer:(prompt_tokens_seconds|predicted_tokens_seconds|preemptions_total|steps_total) ' || true
kill $server; wait $server 2>/dev/null
"$bin/minfer-bench" -m "$model" --config "$out/cuda.yaml" --parallel "$clients" --npp "$npp" --ntg "$ntg" --json > "$out/bench.json" 2> "$out/bench.err"
python3 - "$out/load.txt" "$out/bench.json" <<'PY'
import json, re, sys
load = open(sys.argv[1]).read()
m = re.search(r"= ([0-9.]+) tok/s generated", load)
row = json.load(open(sys.argv[2]))[0]
srv = float(m.group(1)) if m else float("nan")
print(f"bench B={row['pl']}: S_PP {row['speed_pp']:.1f}, S_TG {row['speed_tg']:.1f}, S_GEN {row['speed_gen']:.1f} t/s")
print(f"server {srv:.1f} tok/s = {srv / row['speed_gen']:.3f} x the bench's S_GEN, {srv / row['speed_tg']:.3f} x its S_TG")
PY
