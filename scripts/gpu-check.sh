#!/usr/bin/env bash
# Runs the CUDA checks on a GPU machine from a bundle made by ../shared/tools/gpu-bundle.sh:
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64; bash scripts/gpu-check.sh .gpu OUTDIR
# Writes one log per step into OUTDIR and prints a summary last.
set -uo pipefail
bundle=${1:-.gpu}; out=${2:-/tmp/minfer-gpu}; mkdir -p "$out"
bin=$bundle/build/bin
summary=()
step() {  # step NAME COMMAND...: run, log, remember the outcome
  local name=$1; shift
  local t0=$(date +%s%N)
  "$@" >"$out/$name.log" 2>&1; local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  summary+=("$(printf '%-26s rc=%-3s %8d ms' "$name" "$rc" "$ms")")
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1
step list_backends "$bin/minfer-app" --list-backends
step conformance "$bin/minfer-op-conformance" --gtest_filter='Backends/*cuda*:ConformanceCoverage.*'
step placement "$bin/minfer-tests" --gtest_filter='Placement.*:Loader.Cuda*'
step demo_cuda "$bin/minfer-app" --config configs/cuda.yaml
step demo_mixed "$bin/minfer-app" --config configs/mixed.yaml
step explain_mixed "$bin/minfer-app" --config configs/mixed.yaml --explain
if command -v compute-sanitizer >/dev/null; then
  step memcheck compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$bin/minfer-op-conformance" --gtest_filter='Backends/Conformance.EveryOpDtypeShape/cuda*'
fi
cat "$out/gpu.txt"
grep -h -E '^conformance\[|PASSED|FAILED|ERROR SUMMARY' "$out"/conformance.log "$out"/placement.log "$out"/memcheck.log 2>/dev/null
printf '%s\n' "${summary[@]}"
