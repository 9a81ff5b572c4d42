#!/usr/bin/env bash
# The open issues' GPU figures in one device call, each the mean of two rounds alternated with
# another build's plugin (a bundle from scripts/gpu-pack-plugins.sh; SIDES as in
# scripts/gpu-ab-plugins.sh, default "main new"):
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64; bash scripts/gpu-issue-figures.sh OUT
# Issue 21's table (Qwen2-7B Q4_K_M and Q4_0 pp512/tg128, Qwen2-0.5B Q4_0), the 7B Q4_0's
# tg128 at depth 16,384, and issue 19's Qwen3-30B-A3B-shaped Q4_K_M (the whole 48-layer file,
# 17 GiB: synthesized once, ~2 minutes). The device's name heads the output: the targets are
# the H200's.
set -uo pipefail
out=${1:-/tmp/minfer-figures}; mkdir -p "$out"
[ -f .gpu/build/bin/libminfer_backend_cuda.so ] || bash .gpu/unpack.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"
export SIDES="${SIDES:-main new}"
MODELS="${MODELS:-0.5b:q4_0 7b:q4_0 7b:q4_k_m moe48:q4_k_m}" timeout 420 bash scripts/gpu-ab-plugins.sh "$out/table" "${ROUNDS:-2}" > "$out/table.log" 2>&1
D=16384 P=0 MODELS=7b:q4_0 timeout 150 bash scripts/gpu-ab-plugins.sh "$out/depth" "${ROUNDS:-2}" > "$out/depth.log" 2>&1
echo "== pp512 / tg128 (t/s, mean of the rounds)"; grep -E 't/s \(' "$out/table.log"
echo "== tg128 @ d16384"; grep -E 't/s \(' "$out/depth.log"
