#!/usr/bin/env bash
# Why a decode kernel's warps wait: ncu's stall reasons (the share of a warp's active cycles
# spent in each), its issue rate, DRAM and shared-memory traffic, for a few launches of the
# kernels whose names match REGEX in a decode run (CUDA Graphs off, so each launch is seen):
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
#   bash scripts/gpu-kernel-stalls.sh 7b:q4_0 gemv_staged 40 4 OUT    # one 7B layer's staged GEMVs
#   bash scripts/gpu-kernel-stalls.sh moe12:q4_k_m moe_router 10 1 OUT
# MODEL as scripts/gpu-ab-plugins.sh's MODELS; SKIP launches of the matches are passed over
# (the prompt's and the warm-up's), COUNT profiled. Prints per launch: name, grid, duration,
# the throughputs, then the stall reasons above 3% of active cycles, largest first. DEPTH:
# minfer-bench's -d, as in scripts/gpu-kernel-source.sh (DEPTH=600 with moe12: its attention
# after a 512-token prompt); OPTS: more cuda options, as in scripts/gpu-kernel-times.sh.
set -uo pipefail
spec=${1:-7b:q4_0}; regex=${2:-gemv_staged}; skip=${3:-40}; count=${4:-4}; out=${5:-/tmp/minfer-stalls}
mkdir -p "$out" /tmp/minfer-models
bin=${BIN:-$PWD/.gpu/build/bin}; vocab=${VOCAB:-.gpu/testdata/vocab/ggml-vocab-qwen2.gguf}
source scripts/gpu-sides.sh
f=$(model_file "$spec" "$bin" "$vocab")
printf "backends: {cuda: {cuda_graphs: false${OPTS:+, $OPTS}}}\n" > "$out/nographs.yaml"
metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active
metrics+=,smsp__warps_active.avg.per_cycle_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
metrics+=,launch__grid_size,launch__registers_per_thread,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio
ncu --clock-control none --metrics "$metrics" --print-units base --csv -k "regex:$regex" --launch-skip "$skip" --launch-count "$count" \
  "$bin/minfer-bench" -m "$f" --config "$out/nographs.yaml" ${DEPTH:+-d "$DEPTH"} -p 0 -n 8 -r 1 > "$out/stalls.csv" 2> "$out/ncu.log" ||
  { tail -5 "$out/ncu.log"; exit 1; }
python3 - "$out/stalls.csv" <<'PY'
import collections, csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]
ids, name, metric, value = head.index('ID'), head.index('Kernel Name'), head.index('Metric Name'), head.index('Metric Value')
launches = collections.OrderedDict()
for r in rows[1:]:
    launches.setdefault(r[ids], (r[name], {}))[1][r[metric]] = float(r[value].replace(',', '') or 0)
for _, (kernel, m) in launches.items():
    get = lambda k: m.get(k, float('nan'))
    print(f"{kernel[:110]}")
    print(f"  grid {get('launch__grid_size'):.0f}, {get('launch__registers_per_thread'):.0f} registers; {get('gpu__time_duration.sum') / 1e3:.2f} us, "
          f"DRAM {get('dram__throughput.avg.pct_of_peak_sustained_elapsed'):.1f}% of peak, issue {get('smsp__issue_active.avg.pct_of_peak_sustained_active'):.1f}% "
          f"of cycles at {get('smsp__warps_active.avg.per_cycle_active'):.1f} warps a scheduler; shared wavefronts "
          f"{get('l1tex__data_pipe_lsu_wavefronts_mem_shared.sum'):.0f} ({get('l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum'):.0f} bank conflicts)")
    stalls = {k.split('stalled_')[1].split('_per_issue')[0]: v for k, v in m.items() if 'issue_stalled_' in k}
    total = sum(stalls.values()) or 1
    print("  cycles between a warp's issues, by reason: " +
          ", ".join(f"{k} {v:.2f}" for k, v in sorted(stalls.items(), key=lambda kv: -kv[1]) if v / total > 0.03))
PY
