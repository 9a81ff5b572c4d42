# scripts/gpu-sides.sh — sourced by the side-by-side GPU scripts: one run config per side of
# $SIDES (default "main new"), written as OUT/LABEL.yaml. A side is "new" (the bundle's own
# CUDA plugin), NAME (.gpu/alt/plugin-NAME.so) or LABEL=BASE: BASE's plugin with the backend
# options in $OPTS_LABEL (SIDES="new off=new" OPTS_off="l2_prefetch_mb: 0": one plugin with an
# option on and off). side_label SPEC prints a side's label.
side_label() { echo "${1%%=*}"; }
write_side_configs() {  # write_side_configs OUT: returns 2 when a side's plugin is missing
  local out=$1 spec side base p opts_var
  for spec in ${SIDES:-main new}; do
    side=${spec%%=*}; base=${spec#*=}; opts_var=OPTS_$side
    p=$PWD/.gpu/build/bin/libminfer_backend_cuda.so; [ "$base" != new ] && p=$PWD/.gpu/alt/plugin-$base.so
    [ -f "$p" ] || { echo "no plugin for side $side: $p" >&2; return 2; }
    printf 'backends: {cuda: {plugin: %s%s}}\n' "$p" "${!opts_var:+, ${!opts_var}}" > "$out/$side.yaml"
  done
}
