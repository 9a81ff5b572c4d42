#!/usr/bin/env bash
# CPU decode against the memory stream of the same minute: these VMs' bandwidth swings by 40%
# within minutes (scripts/cpu-bandwidth.sh 1500: 71.6 then 42.6 GB/s around one set of runs),
# so a decode figure means something only beside streams measured right before and after it.
# Per round and config: the 2-thread stream, `minfer-bench -p 0 -n N -r 2`, the stream again;
# the decode's bytes a second (its active bytes a token, scripts/active-bytes.py, times t/s)
# as a share of those two streams' mean. Configs alternate within each round.
#   bash scripts/cpu-decode-sitting.sh MODEL.gguf [ROUNDS=3] CONFIG.yaml [CONFIG.yaml ...]
# e.g. issue 19's bar (>= 80% on the Qwen3-30B-A3B preset's 12-layer slice, 2 threads):
#   printf 'backends: {cpu: {threads: 2}}\n' > /tmp/def.yaml
#   printf 'backends: {cpu: {threads: 2, isa: avx2}}\n' > /tmp/avx2.yaml
#   bash scripts/cpu-decode-sitting.sh /tmp/minfer-models/moe12-q4_k_m.gguf 3 /tmp/def.yaml /tmp/avx2.yaml
set -euo pipefail
model=${1:?MODEL.gguf}; shift
rounds=3
if [[ ${1:-} =~ ^[0-9]+$ ]]; then rounds=$1; shift; fi
(($# > 0)) || { echo "give at least one run config (backends: {cpu: ...})" >&2; exit 2; }
bin=${BIN:-build/bin}; n=${N:-32}
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
bytes=$("$bin/minfer-gguf" info "$model" --json | python3 "$here/active-bytes.py" --bytes)
[ -n "$bytes" ] || { echo "no active-byte total for $model (scripts/active-bytes.py)" >&2; exit 1; }
stream() { bash "$here/cpu-bandwidth.sh" 1500 | awk '/2 thread/ {print $(NF-1)}'; }
echo "active bytes a token: $bytes; ${n}-token decode, 2-thread stream of 1500 MB before and after each run"
for r in $(seq "$rounds"); do
  for cfg in "$@"; do
    before=$(stream)
    tg=$("$bin/minfer-bench" -m "$model" --config "$cfg" -p 0 -n "$n" -r 2 2>&1 | awk -F'|' '/tg[0-9]/ {split($8, v, "±"); gsub(/ /, "", v[1]); print v[1]}')
    after=$(stream)
    [ -n "$tg" ] || { echo "minfer-bench gave no tg figure with $cfg" >&2; exit 1; }
    awk -v c="$(basename "$cfg" .yaml)" -v t="$tg" -v b="$bytes" -v s0="$before" -v s1="$after" 'BEGIN {
      gbs = t * b / 1e9; printf "%-12s tg%s %7.2f t/s  %5.1f GB/s  stream %5.1f / %5.1f GB/s  %5.1f%%\n", c, '"$n"', t, gbs, s0, s1, 100 * gbs / ((s0 + s1) / 2) }' |
      tee -a "$dir/runs.txt"
  done
done
echo "== per config: median share of the stream (min..max)"
awk '{print $1, $NF}' "$dir/runs.txt" | tr -d '%' | sort -k1,1 -k2,2n |
  awk '{v[$1] = v[$1] " " $2; c[$1]++} END {for (k in v) {split(substr(v[k], 2), a, " "); m = c[k]; med = m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2; printf "%-12s %5.1f%% (%s..%s, %d runs)\n", k, med, a[1], a[m], m}}'
