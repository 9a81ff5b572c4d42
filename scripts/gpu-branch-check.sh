#!/usr/bin/env bash
# One device call that decides whether a CUDA branch may merge: its correctness checks, then
# its speed side by side with other builds' plugins, from a bundle made by
# scripts/gpu-pack-plugins.sh (this build's plugin as "new", the others in .gpu/alt):
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
#   bash scripts/gpu-branch-check.sh OUT
# Steps (each logged under OUT, a summary last): the CUDA tests (CudaVsCpu on every type, the
# wide decode, the other architectures, Explain, batched stories), the CUDA conformance suite,
# compute-sanitizer memcheck on the matmul/expert conformance cases and racecheck on the
# matmul ones, one matmul alone per type (TYPES; cold: the op bench rotates weight copies) for
# every side, then whole models (MODELS, ROUNDS) through scripts/gpu-ab-plugins.sh.
# SIDES (default: "main new"), TYPES (default "q4_0 q4_k q5_k q6_k q8_0 q3_k"; none: no op bench), MODELS (default
# "7b:q4_0 7b:q4_k_m"), ROUNDS (default 2), SKIP_AB=1 for correctness and the op bench only.
set -uo pipefail
out=${1:-/tmp/minfer-branch}; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
[ -f .gpu/build/bin/libminfer_backend_cuda.so ] || bash .gpu/unpack.sh
mkdir -p ../shared && [ -e ../shared/testdata ] || ln -s "$PWD/.gpu/testdata" ../shared/testdata
export MINFER_TESTDATA=$PWD/.gpu/testdata
bin=.gpu/build/bin
summary=()
step() {  # step NAME COMMAND...: run, log, remember the outcome
  local name=$1; shift
  local t0=$(date +%s)
  "$@" > "$out/$name.log" 2>&1; local rc=$?
  summary+=("$(printf '%-12s rc=%-3s %5d s  %s' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$(grep -E '^\[  (PASSED|FAILED) ' "$out/$name.log" | tail -1)")")
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"
step tests timeout 300 "$bin/minfer-tests" \
  --gtest_filter='AllTypes/CudaVsCpu*:CudaVsCpuWide.*:CudaVsCpuArchs.*:Explain.*:*StoriesBatch*:*SynthBatch*cuda*'
step conformance timeout 200 "$bin/minfer-op-conformance" --gtest_filter='Backends/*cuda*:ConformanceCoverage.*'
if command -v compute-sanitizer > /dev/null; then
  MINFER_CONFORMANCE_OPS=matmul,matmul_id,moe_sum step memcheck timeout 300 compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$bin/minfer-op-conformance" --gtest_filter='Backends/Conformance.EveryOpDtypeShape/cuda'
  MINFER_CONFORMANCE_OPS=matmul step racecheck timeout 300 compute-sanitizer --tool racecheck --error-exitcode 1 \
    "$bin/minfer-op-conformance" --gtest_filter='Backends/Conformance.EveryOpDtypeShape/cuda'
fi
source scripts/gpu-sides.sh
write_side_configs "$out" || echo "a side's plugin is missing: its op bench rows read '?'" >&2
# One matmul alone, one token, a 7B gate (3584 -> 18944) and down (18944 -> 3584), sides
# alternated twice.
[ "${TYPES:-}" = none ] && TYPES=" "  # TYPES=none: no op bench
for t in ${TYPES-q4_0 q4_k q5_k q6_k q8_0 q3_k}; do
  for shape in "3584 18944" "18944 3584"; do
    set -- $shape
    for r in 1 2; do
      for spec in ${SIDES:-main new}; do
        side=$(side_label "$spec")
        gbs=$(timeout 60 "$bin/minfer-bench" --op matmul --type "$t" -k "$1" --rows "$2" --tokens 1 -r 300 --config "$out/$side.yaml" 2>&1 |
              grep -o 'read at [0-9.]* GB/s' | grep -o '[0-9.]*')
        echo "$t k$1 $side ${gbs:-?}" >> "$out/op.txt"
      done
    done
  done
done
awk '$4 != "?" {k = $1 " " $2 " " $3; s[k] += $4; n[k]++} END {for (k in s) printf "%-18s %8.1f GB/s\n", k, s[k] / n[k]}' "$out/op.txt" | sort > "$out/op-mean.txt"
[ "${SKIP_AB:-0}" = 1 ] || SIDES="${SIDES:-main new}" MODELS="${MODELS:-7b:q4_0 7b:q4_k_m}" timeout 400 bash scripts/gpu-ab-plugins.sh "$out/ab" "${ROUNDS:-2}" > "$out/ab.log" 2>&1
echo "== op bench (cold, GB/s of weights)"; cat "$out/op-mean.txt"
[ -f "$out/ab.log" ] && { echo "== models"; tail -n 20 "$out/ab.log"; }
echo "== checks"; printf '%s\n' "${summary[@]}"
