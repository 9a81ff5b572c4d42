#!/usr/bin/env bash
# Issue 16's speed figures on a GPU machine, from a bundle (see docs/BUILD.md):
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64; bash scripts/gpu-batched-bench.sh .gpu OUTDIR [B_LIST]
# Synthesizes Qwen2-7B Q4_0 (the Qwen2 vocabulary), then the single-sequence benchmark
# (-p 512 -n 128) and the batched one (--parallel 1,4,16,64 --npp 512 --ntg 128), as tables
# and JSON. PRESET (default 7b) picks another size.
set -uo pipefail
bundle=${1:-.gpu}; out=${2:-/tmp/minfer-batched}; list=${3:-1,4,16,64}; mkdir -p "$out"
bin=$bundle/build/bin
preset=${PRESET:-7b}
model=/tmp/minfer-models/qwen2-$preset-q4_0.gguf; mkdir -p /tmp/minfer-models
[ -f "$model" ] || "$bin/minfer-gguf" synth --arch qwen2 --preset "$preset" --type q4_0 --seed 1 \
  --vocab "$bundle/testdata/vocab/ggml-vocab-qwen2.gguf" -o "$model" > "$out/synth.log" 2>&1
printf 'backends: {cuda: {}}\n' > "$out/cuda.yaml"
"$bin/minfer-bench" -m "$model" --config "$out/cuda.yaml" -p 512 -n 128 -r 3 > "$out/single.md" 2>&1
"$bin/minfer-bench" -m "$model" --config "$out/cuda.yaml" --parallel "$list" --npp 512 --ntg 128 > "$out/batched.md" 2>&1
"$bin/minfer-bench" -m "$model" --config "$out/cuda.yaml" --parallel "$list" --npp 512 --ntg 128 --json > "$out/batched.json" 2>&1
cat "$out/single.md" "$out/batched.md"
