#!/usr/bin/env bash
# The one-launch routed FFN of a decode token (cuda option moe_ffn_fused, off by default until
# this has passed on a GPU) in one device call, from a bundle made by scripts/gpu-pack-plugins.sh:
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64; bash scripts/gpu-moe-ffn-check.sh OUT
# Its tests (the logits bit for bit those of the three launches; --explain), compute-sanitizer
# memcheck on a tiny Qwen3-MoE with it on, then tg128 with it on against off, alternated: the
# 12-layer 30B-A3B slice (two rounds) and, with MOE48=1, the whole 48-layer file (one round;
# 17 GiB synthesized first, ~2 minutes).
set -uo pipefail
out=${1:-/tmp/minfer-moe-ffn}; mkdir -p "$out"
[ -f .gpu/build/bin/libminfer_backend_cuda.so ] || bash .gpu/unpack.sh
bin=$PWD/.gpu/build/bin
export MINFER_TESTDATA=$PWD/.gpu/testdata
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"
timeout 150 "$bin/minfer-tests" --gtest_filter='CudaVsCpuArchs.OneLaunch*:CudaVsCpuArchs.TinyMoe*:Explain.CudaNamesPathsAndFusions' \
  > "$out/tests.log" 2>&1
echo "tests rc=$?"
grep -E '^\[  (FAILED|PASSED)|Failure|tiny .* decode' "$out/tests.log" | head -30
"$bin/minfer-gguf" synth --arch qwen3moe --preset tiny --type q4_k_m --seed 3 -o /tmp/minfer-moe-tiny.gguf > /dev/null 2>&1
printf 'backends: {cuda: {moe_ffn_fused: true}}\nprompt: "one two three four five six seven eight nine ten"\ncontext: 256\ngeneration: {n_predict: 8}\n' \
  > "$out/tiny.yaml"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 "$bin/minfer-app" --config "$out/tiny.yaml" -m /tmp/minfer-moe-tiny.gguf \
  > "$out/memcheck.log" 2>&1
echo "memcheck rc=$?"
tail -n 2 "$out/memcheck.log"
export SIDES="off=new on=new" OPTS_on="moe_ffn_fused: true"
MODELS=moe12:q4_k_m timeout 200 bash scripts/gpu-ab-plugins.sh "$out/ab12" 2 > "$out/ab12.log" 2>&1
tail -n 4 "$out/ab12.log"
if [ "${MOE48:-0}" = 1 ]; then
  MODELS=moe48:q4_k_m timeout 300 bash scripts/gpu-ab-plugins.sh "$out/ab48" 1 > "$out/ab48.log" 2>&1
  tail -n 4 "$out/ab48.log"
fi
