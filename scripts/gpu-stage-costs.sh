#!/usr/bin/env bash
# What each decode stage costs inside the real step (CUDA graph, PDL overlap), which ncu's
# one-kernel-at-a-time times cannot show: minfer-bench's tg rate with the stage left out
# (MINFER_CUDA_SKIP_NODES, the CUDA plugin's diagnostic: the results are wrong, the timing is
# the point) against the whole step, alternated over ROUNDS rounds:
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
#   bash scripts/gpu-stage-costs.sh 7b:q4_0 moe12:q4_k_m      # ROUNDS=2 P=512 N=128 CONFIG=run.yaml (default: cuda)
# MODELS as scripts/gpu-ab-plugins.sh's (qwen2 preset:type, moe12 / moe48 for the 30B-A3B
# preset). Prints per model and stage: us a layer = (1000 / tg_without - 1000 / tg_whole) ms
# a token over the layers; "all" leaves every node out (graph launch and host time).
set -uo pipefail
bin=${BIN:-$PWD/.gpu/build/bin}; vocab=${VOCAB:-.gpu/testdata/vocab/ggml-vocab-qwen2.gguf}
source scripts/gpu-sides.sh
# The CUDA backend with its defaults unless CONFIG names a run config (minfer-bench's own default is the CPU).
[ -n "${CONFIG:-}" ] || { CONFIG=/tmp/minfer-stage-costs.yaml; printf 'backends: {cuda: {}}\n' > "$CONFIG"; }
config=(--config "$CONFIG")
tg() {  # tg MODEL REGEX: the tg rate with the matching nodes left out
  MINFER_CUDA_SKIP_NODES="$2" "$bin/minfer-bench" -m "$1" "${config[@]}" -p "${P:-512}" -n "${N:-128}" -r 1 2>/dev/null |
    grep -E '\| *tg[0-9]' | awk -F'|' '{split($8, v, "±"); gsub(/ /, "", v[1]); print v[1]}'
}
for spec in "$@"; do
  preset=${spec%%:*}; f=$(model_file "$spec" "$bin" "$vocab")
  layers=$("$bin/minfer-gguf" info "$f" | sed -n 's/.*layers \([0-9]*\),.*/\1/p' | head -1)
  # Stages by their nodes' names (a fused group by its first node).
  stages=("qkv=attn_q\$" "attn=attn_q_norm\$|attn_k_norm\$|_rope\$|\\.attn\$" "o=attn_output\$" "out=^output_norm\$|^output\$|^logits\$")
  if [[ $preset == moe* ]]; then
    stages+=("router=ffn_norm\$|ffn_moe_" "gate_up=ffn_gate_exps\$|ffn_up_exps\$|ffn_glu_exps\$" "down=ffn_down_exps\$|ffn_sum_exps\$|ffn_residual\$")
  else
    stages+=("gate_up=ffn_gate\$|ffn_up\$|ffn_swiglu\$" "down=ffn_down\$")
  fi
  stages+=("all=.")
  declare -A sum=() runs=()
  for r in $(seq "${ROUNDS:-2}"); do
    for st in "whole=^\$" "${stages[@]}"; do
      name=${st%%=*}; v=$(tg "$f" "${st#*=}")
      [ -n "$v" ] || { echo "$spec $name: no tg figure (is there a GPU? run minfer-bench by hand)" >&2; continue; }
      sum[$name]=$(awk -v a="${sum[$name]:-0}" -v b="$v" 'BEGIN {print a + b}'); runs[$name]=$(( ${runs[$name]:-0} + 1 ))
    done
  done
  [ -n "${runs[whole]:-}" ] || continue
  whole=$(awk -v s="${sum[whole]}" -v n="${runs[whole]}" 'BEGIN {print s / n}')
  printf '%s: whole step %.1f t/s, %s layers\n' "$spec" "$whole" "$layers"
  for st in "${stages[@]}"; do
    name=${st%%=*}; [ -n "${runs[$name]:-}" ] || continue
    awk -v s="${sum[$name]}" -v n="${runs[$name]}" -v w="$whole" -v l="$layers" -v name="$name" 'BEGIN {
      t = s / n; ms = 1000 / w - 1000 / t
      if (name == "all" || name == "out") printf "  %-8s %9.1f t/s without: %7.1f us a token\n", name, t, 1000 * ms
      else printf "  %-8s %9.1f t/s without: %6.1f us a layer\n", name, t, 1000 * ms / l }'
  done
  unset sum runs
done
