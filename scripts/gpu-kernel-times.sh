#!/usr/bin/env bash
# Per-kernel GPU time of a benchmark run, from ncu (one metric, so it stays quick):
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
#   bash scripts/gpu-kernel-times.sh .gpu 7b:q4_0 512 1 OUTDIR     # a 512-token prefill (+1 decode step)
#   bash scripts/gpu-kernel-times.sh .gpu 0.5b:q4_k_m 0 8 OUTDIR    # 8 decode steps
#   PARALLEL=4 bash scripts/gpu-kernel-times.sh .gpu 7b:q4_0 16 3 OUTDIR  # batched: 4 sequences, --npp 16 --ntg 3
#   bash scripts/gpu-kernel-times.sh .gpu gemma2/2b:q4_k_m 512 8 OUTDIR   # another architecture
# OPTS: more cuda options (OPTS="dense_ffn_fused: true").
# Prints each kernel's launches, total time and share, biggest first. CUDA Graphs are off so
# every launch is seen; the models are synthesized once into /tmp/minfer-models.
set -uo pipefail
bundle=${1:-.gpu}; spec=${2:-0.5b:q4_0}; p=${3:-512}; n=${4:-1}; out=${5:-/tmp/minfer-kernels}
mkdir -p "$out" /tmp/minfer-models
bin=$bundle/build/bin
# SPEC: PRESET:TYPE (qwen2, its vocabulary) or ARCH/PRESET:TYPE (gemma2/2b:q4_k_m: a generated vocabulary).
arch=qwen2; [[ $spec == */* ]] && arch=${spec%%/*} && spec=${spec#*/}
preset=${spec%%:*}; type=${spec##*:}; model=/tmp/minfer-models/$arch-$preset-$type.gguf
vocab=(); [ "$arch" = qwen2 ] && vocab=(--vocab "$bundle/testdata/vocab/ggml-vocab-qwen2.gguf")
[ -f "$model" ] || "$bin/minfer-gguf" synth --arch "$arch" --preset "$preset" --type "$type" --seed 1 "${vocab[@]}" -o "$model" > /dev/null
printf "backends: {cuda: {cuda_graphs: false${OPTS:+, $OPTS}}}\n" > "$out/nographs.yaml"
args=(-p "$p" -n "$n" -r 1)
[ -n "${PARALLEL:-}" ] && args=(--parallel "$PARALLEL" --npp "$p" --ntg "$n")
ncu --clock-control none --metrics gpu__time_duration.sum --print-units base --csv \
  "$bin/minfer-bench" -m "$model" --config "$out/nographs.yaml" "${args[@]}" > "$out/kernels.csv" 2> "$out/ncu.log"
python3 - "$out/kernels.csv" <<'PY'
import collections, csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]
name, value = head.index('Kernel Name'), head.index('Metric Value')
total, count = collections.defaultdict(float), collections.Counter()
for r in rows[1:]:
    try:
        ns = float(r[value].replace(',', ''))
    except ValueError:
        continue
    k = r[name].split('(')[0].split('<')[0].split('::')[-1].strip()
    total[k] += ns
    count[k] += 1
all_ns = sum(total.values()) or 1.0
for k, ns in sorted(total.items(), key=lambda kv: -kv[1]):
    print('%-34s %6d launches %11.1f us %5.1f%%' % (k, count[k], ns / 1000, 100 * ns / all_ns))
print('all kernels: %.1f us (minfer-bench runs its test once more as a warm-up: halve for one run)' % (all_ns / 1000))
PY
