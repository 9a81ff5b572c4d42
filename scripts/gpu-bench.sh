#!/usr/bin/env bash
# Issue 5's benchmark table on a GPU machine, from a bundle (see docs/BUILD.md):
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64; bash scripts/gpu-bench.sh .gpu OUTDIR
# Synthesizes the models (qwen2 shapes, the Qwen2 vocabulary), then minfer-bench -p 512 -n 128.
set -uo pipefail
bundle=${1:-.gpu}; out=${2:-/tmp/minfer-bench}; mkdir -p "$out"
bin=$bundle/build/bin
vocab=$bundle/testdata/vocab/ggml-vocab-qwen2.gguf
models=/tmp/minfer-models; mkdir -p "$models"
for spec in 0.5b:q4_0 0.5b:q8_0 0.5b:q4_k_m 7b:q4_0; do
  preset=${spec%%:*}; type=${spec##*:}
  f=$models/qwen2-$preset-$type.gguf
  [ -f "$f" ] || "$bin/minfer-gguf" synth --arch qwen2 --preset "$preset" --type "$type" --seed 1 --vocab "$vocab" -o "$f" >> "$out/synth.log" 2>&1
done
cfg() { printf 'backends: {cuda: {%s}}\n' "$1" > "$out/$2.yaml"; echo "$out/$2.yaml"; }
run() {  # run LABEL MODEL OPTIONS
  echo "## $1" >> "$out/bench.md"
  "$bin/minfer-bench" -m "$2" --config "$(cfg "$3" "$1")" -p 512 -n 128 -r 3 2>&1 | tail -n 2 >> "$out/bench.md"
}
: > "$out/bench.md"
# A first, unrecorded run: on a freshly started machine the first minutes run slower (clocks,
# first-touch), which made the first row of a table read up to 10% low.
"$bin/minfer-bench" -m "$models/qwen2-0.5b-q4_0.gguf" --config "$(cfg "" warmup)" -p 512 -n 128 -r 3 > /dev/null 2>&1
run q05_q4_0 "$models/qwen2-0.5b-q4_0.gguf" ""
run q05_q4_0_f16gemm "$models/qwen2-0.5b-q4_0.gguf" "mmq: false"
run q05_q4_0_nographs "$models/qwen2-0.5b-q4_0.gguf" "cuda_graphs: false"
run q05_q8_0 "$models/qwen2-0.5b-q8_0.gguf" ""
run q05_q4_k_m "$models/qwen2-0.5b-q4_k_m.gguf" ""
run q7b_q4_0 "$models/qwen2-7b-q4_0.gguf" ""
run q05_q4_0_again "$models/qwen2-0.5b-q4_0.gguf" ""  # the first row again: the run-to-run spread
cat "$out/bench.md"
