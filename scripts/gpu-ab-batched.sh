#!/usr/bin/env bash
# Batched decode side by side: CUDA plugins alternated per round on a synthetic Qwen2-7B Q4_0
# (minfer-bench --parallel, llama-batched-bench's table), from a bundle made by
# scripts/gpu-pack-plugins.sh:
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
#   SIDES="main new" bash scripts/gpu-ab-batched.sh OUT [ROUNDS]
# SIDES as in scripts/gpu-ab-plugins.sh; B (default 4,16,64), NPP (128), NTG (64), PRESET (7b).
set -uo pipefail
out=${1:-/tmp/minfer-ab-batched}; rounds=${2:-2}
mkdir -p "$out" /tmp/minfer-models
[ -f .gpu/build/bin/libminfer_backend_cuda.so ] || bash .gpu/unpack.sh
bin=$PWD/.gpu/build/bin
f=/tmp/minfer-models/${PRESET:-7b}-q4_0.gguf
[ -f "$f" ] || "$bin/minfer-gguf" synth --arch qwen2 --preset "${PRESET:-7b}" --type q4_0 --seed 1 --vocab .gpu/testdata/vocab/ggml-vocab-qwen2.gguf -o "$f" > /dev/null 2>&1
source scripts/gpu-sides.sh
write_side_configs "$out" || exit 2
for r in $(seq "$rounds"); do
  for spec in ${SIDES:-main new}; do
    side=$(side_label "$spec")
    # the rows: | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | ...
    env $(side_env "$side") "$bin/minfer-bench" -m "$f" --config "$out/$side.yaml" --parallel "${B:-4,16,64}" --npp "${NPP:-128}" --ntg "${NTG:-64}" 2>&1 |
      awk -F'|' -v s="$side" '$4 ~ /^ *[0-9]+ *$/ {gsub(/ /, "", $4); gsub(/ /, "", $9); print "B" $4, s, $9}' | tee -a "$out/ab.txt"
  done
done
echo "== S_TG (t/s, mean of the rounds)"
awk '{k = $1 " " $2; sum[k] += $3; n[k]++} END {for (k in sum) printf "%-12s %10.1f (%d runs)\n", k, sum[k] / n[k], n[k]}' "$out/ab.txt" | sort
