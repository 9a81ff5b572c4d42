#!/usr/bin/env bash
# CUDA plugins side by side on one GPU machine, alternating per round (the machine drifts by
# several percent within a session), from a bundle made by scripts/gpu-pack-plugins.sh:
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
#   SIDES="main new" MODELS="7b:q4_k_m moe12:q4_k_m" bash scripts/gpu-ab-plugins.sh OUT [ROUNDS]
# SIDES: "new" is the bundle's own plugin, any other name .gpu/alt/plugin-NAME.so; LABEL=BASE
# runs BASE's plugin with the backend options of $OPTS_LABEL, and $BENCH_LABEL, where set, is
# the minfer-bench a side runs (host-side changes: SIDES="old=new new" BENCH_old=PATH), and
# $ENV_LABEL environment for its runs (scripts/gpu-sides.sh). MODELS:
# qwen2 preset:type pairs, moe12 / moe48 for the Qwen3-30B-A3B preset's 12-layer slice or
# whole file; each synthesized once. P, N and D: minfer-bench's -p, -n and -d (512, 128, 0).
set -uo pipefail
out=${1:-/tmp/minfer-ab}; rounds=${2:-2}
mkdir -p "$out" /tmp/minfer-models
[ -f .gpu/build/bin/libminfer_backend_cuda.so ] || bash .gpu/unpack.sh
bin=$PWD/.gpu/build/bin; vocab=.gpu/testdata/vocab/ggml-vocab-qwen2.gguf
source scripts/gpu-sides.sh
write_side_configs "$out" || exit 2
for spec in ${MODELS:-7b:q4_k_m}; do
  f=$(model_file "$spec" "$bin" "$vocab")
  "$bin/minfer-bench" -m "$f" --config "$out/new.yaml" -p 64 -n 16 -r 1 > /dev/null 2>&1  # warm-up, not recorded
  for r in $(seq "$rounds"); do
    for side_spec in ${SIDES:-main new}; do  # not $spec: the model's, printed below
      side=$(side_label "$side_spec")
      env $(side_env "$side") "$(side_bench "$side" "$bin")" -m "$f" --config "$out/$side.yaml" -p "${P:-512}" -n "${N:-128}" -d "${D:-0}" -r 3 2>&1 | grep -E '\| *(pp|tg)[0-9]' |
        awk -v s="$side" -v m="$spec" -F'|' '{gsub(/ /, "", $7); split($8, v, "±"); printf "%s %s %s %s\n", m, $7, s, v[1]}' | tee -a "$out/ab.txt"
    done
  done
done
awk '{k = $1 " " $2 " " $3; sum[k] += $4; n[k]++} END {for (k in sum) printf "%-22s %10.1f t/s (%d runs)\n", k, sum[k] / n[k], n[k]}' "$out/ab.txt" | sort
