# scripts/gpu-sides.sh — sourced by the side-by-side GPU scripts: one run config per side of
# $SIDES (default "main new"), written as OUT/LABEL.yaml. A side is "new" (the bundle's own
# CUDA plugin), NAME (.gpu/alt/plugin-NAME.so) or LABEL=BASE: BASE's plugin with the backend
# options in $OPTS_LABEL (SIDES="new off=new" OPTS_off="staged_row_groups: false": one plugin with an
# option on and off). $BENCH_LABEL, where set, is the minfer-bench that side runs (a host-side
# change: SIDES="old=new new" BENCH_old=.gpu/alt/minfer-bench-old, one plugin, two hosts);
# side_bench LABEL BIN prints it. $ENV_LABEL, where set, is environment for that side's runs
# (a diagnostic of a test build: SIDES="new gc128=new" ENV_gc128="MINFER_GC=128"); side_env
# LABEL prints it. side_label SPEC prints a side's label.
side_bench() { local v=BENCH_$1; echo "${!v:-$2/minfer-bench}"; }
side_env() { local v=ENV_$1; echo "${!v:-}"; }
side_label() { echo "${1%%=*}"; }
# model_file SPEC BIN VOCAB: prints the synthetic model of SPEC (a qwen2 preset:type, or moe12 /
# moe48 for the Qwen3-30B-A3B preset's 12-layer slice or whole file), synthesized into
# /tmp/minfer-models once.
model_file() {
  local spec=$1 bin=$2 vocab=$3 preset type f args
  preset=${spec%%:*}; type=${spec##*:}; f=/tmp/minfer-models/$preset-$type.gguf
  case $preset in
    moe12) args=(--arch qwen3moe --preset 30b-a3b --layers 12) ;;
    moe48) args=(--arch qwen3moe --preset 30b-a3b) ;;
    *) args=(--arch qwen2 --preset "$preset") ;;
  esac
  mkdir -p /tmp/minfer-models
  [ -f "$f" ] || "$bin/minfer-gguf" synth "${args[@]}" --type "$type" --seed 1 --vocab "$vocab" -o "$f" > /dev/null 2>&1
  echo "$f"
}
write_side_configs() {  # write_side_configs OUT: returns 2 when a side's plugin is missing
  local out=$1 spec side base p opts_var
  for spec in ${SIDES:-main new}; do
    side=${spec%%=*}; base=${spec#*=}; opts_var=OPTS_$side
    p=$PWD/.gpu/build/bin/libminfer_backend_cuda.so; [ "$base" != new ] && p=$PWD/.gpu/alt/plugin-$base.so
    [ -f "$p" ] || { echo "no plugin for side $side: $p" >&2; return 2; }
    printf 'backends: {cuda: {plugin: %s%s}}\n' "$p" "${!opts_var:+, ${!opts_var}}" > "$out/$side.yaml"
  done
}
