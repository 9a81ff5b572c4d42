#!/usr/bin/env bash
# Where one decode kernel's instructions and waits are, line by line of its SASS: ncu's source
# counters for one launch of the kernels whose names match REGEX (CUDA Graphs off), summed into
# the kernel's phases and its hottest lines:
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
#   bash scripts/gpu-kernel-source.sh 7b:q4_0 gemv_staged 42 OUT    # a 7B layer's gate/up GEMV
#   ROWS=37888 bash scripts/gpu-kernel-source.sh ...                  # also per row (2 x 18,944)
# MODEL as scripts/gpu-ab-plugins.sh's MODELS; SKIP launches of the matches are passed over
# (gemv_staged: 40 = QKV, 41 = O, 42 = gate/up, 43 = down of a 7B's second decode step). The
# phases: before ACQBULK (griddepcontrol.wait: what overlaps the previous kernel), up to the
# first BAR.SYNC (after the wait: x's loads and quantizing in the GEMVs), and the rest. ROWS:
# the launch's rows, to print instructions a row. DEPTH: minfer-bench's -d (a cache of DEPTH
# tokens first: the decode attention at that depth; launches of its prefill that match count
# in SKIP). `--csv FILE` summarizes a saved source page
# (ncu -i REPORT --page source --csv --print-source sass) instead of profiling.
set -uo pipefail
summarize() {
  python3 - "$1" "${ROWS:-0}" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
per_row = int(sys.argv[2])
head_at = next(i for i, r in enumerate(rows) if 'Instructions Executed' in r)
head = rows[head_at]
ins, smp, src = head.index('Instructions Executed'), head.index('Warp Stall Sampling (All Samples)'), head.index('Source')
num = lambda v: int(float(v.replace(',', '') or 0))
lines = [(num(r[ins]), num(r[smp]), r[src].strip()) for r in rows[head_at + 1:] if len(r) > max(ins, smp, src)]
total_i, total_s = sum(l[0] for l in lines), sum(l[1] for l in lines) or 1
if head_at > 0 and len(rows[0]) > 1: print(rows[0][1][:140])
waited = next((i for i, l in enumerate(lines) if 'ACQBULK' in l[2]), -1)
synced = next((i for i, l in enumerate(lines) if 'BAR.SYNC' in l[2] and i > waited), len(lines))
phases = [('before the wait', 0, waited + 1), ('wait to first barrier', waited + 1, synced + 1), ('after', synced + 1, len(lines))]
print(f"{total_i} warp instructions{f', {total_i / per_row:.0f} a row' if per_row else ''}; {total_s} stall samples")
for name, a, b in phases:
    i, s = sum(l[0] for l in lines[a:b]), sum(l[1] for l in lines[a:b])
    print(f"  {name:22s} instructions {i:10d} ({100 * i / max(total_i, 1):4.1f}%)  samples {s:6d} ({100 * s / total_s:4.1f}%)")
print("  hottest lines (samples, executions, line number, SASS):")
for n, (i, s, text) in sorted(enumerate(lines), key=lambda kv: -kv[1][1])[:15]:
    print(f"    {s:6d} {i:10d} {n:5d}  {text[:90]}")
PY
}
if [ "${1:-}" = --csv ]; then summarize "$2"; exit; fi
spec=${1:-7b:q4_0}; regex=${2:-gemv_staged}; skip=${3:-42}; out=${4:-/tmp/minfer-source}
mkdir -p "$out" /tmp/minfer-models
bin=${BIN:-$PWD/.gpu/build/bin}; vocab=${VOCAB:-.gpu/testdata/vocab/ggml-vocab-qwen2.gguf}
source scripts/gpu-sides.sh
f=$(model_file "$spec" "$bin" "$vocab")
printf 'backends: {cuda: {cuda_graphs: false}}\n' > "$out/nographs.yaml"
ncu --clock-control none --section SourceCounters -k "regex:$regex" --launch-skip "$skip" --launch-count 1 -o "$out/kernel" -f \
  "$bin/minfer-bench" -m "$f" --config "$out/nographs.yaml" ${DEPTH:+-d "$DEPTH"} -p 0 -n 8 -r 1 > "$out/ncu.log" 2>&1 || { tail -5 "$out/ncu.log"; exit 1; }
ncu -i "$out/kernel.ncu-rep" --page source --csv --print-source sass > "$out/source.csv" 2> "$out/source.err" || { cat "$out/source.err"; exit 1; }
summarize "$out/source.csv"
