#!/usr/bin/env bash
# Two builds side by side on one GPU machine, alternating A and B per round so the machine's
# drift (clocks warming up, other tenants) falls on both alike:
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
#   bash scripts/gpu-ab.sh .gpu/build/bin .gpu/alt/bin OUTDIR [ROUNDS]
# Carry a second build by copying its bin/ (apps and plugins, ~10 MB) into the bundle after
# ../shared/tools/gpu-bundle.sh (e.g. cp -r build-main/bin .gpu/alt/bin); the bundle's lib/
# serves both. MODELS (default "0.5b:q4_0") lists preset:type pairs, synthesized once;
# BACKEND (default cuda) picks the backend; OPTS_A / OPTS_B (e.g. "pdl: false") are backend
# options for one side, so one build can be compared with itself under two settings.
set -uo pipefail
a=${1:?bin dir A}; b=${2:?bin dir B}; out=${3:-/tmp/minfer-ab}; rounds=${4:-3}
mkdir -p "$out"
vocab=.gpu/testdata/vocab/ggml-vocab-qwen2.gguf
models=/tmp/minfer-models; mkdir -p "$models"
printf "backends: {%s: {%s}}\n" "${BACKEND:-cuda}" "${OPTS_A:-}" > "$out/A.yaml"
printf "backends: {%s: {%s}}\n" "${BACKEND:-cuda}" "${OPTS_B:-}" > "$out/B.yaml"
for spec in ${MODELS:-0.5b:q4_0}; do
  preset=${spec%%:*}; type=${spec##*:}; f=$models/qwen2-$preset-$type.gguf
  [ -f "$f" ] || "$a/minfer-gguf" synth --arch qwen2 --preset "$preset" --type "$type" --seed 1 --vocab "$vocab" -o "$f" > /dev/null 2>&1
  "$a/minfer-bench" -m "$f" --config "$out/A.yaml" -p 512 -n 128 -r 2 > /dev/null 2>&1  # warm-up, not recorded
  for r in $(seq "$rounds"); do
    for side in A B; do
      bin=$a; [ "$side" = B ] && bin=$b
      "$bin/minfer-bench" -m "$f" --config "$out/$side.yaml" -p 512 -n 128 -r 3 2>&1 | grep -E 'pp512|tg128' |
        awk -v s="$side" -v m="$preset-$type" -F'|' '{gsub(/ /, "", $7); split($8, v, "±"); printf "%s %s %s %s\n", m, s, $7, v[1]}' >> "$out/ab.txt"
    done
  done
done
# Mean per model, side and test.
awk '{k = $1 " " $3 " " $2; sum[k] += $4; n[k]++} END {for (k in sum) printf "%-18s %10.1f t/s (%d runs)\n", k, sum[k] / n[k], n[k]}' "$out/ab.txt" | sort
