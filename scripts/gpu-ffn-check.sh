#!/usr/bin/env bash
# The one-launch FFNs of a decode token (cuda options moe_ffn_fused and dense_ffn_fused, and
# attn_out_fused: the output projection first; off by default until measured) in one device
# call, from a bundle made by scripts/gpu-pack-plugins.sh:
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64; bash scripts/gpu-ffn-check.sh OUT
# Their tests (the routed form's logits bit for bit those of its three launches, the others
# against the CPU; --explain), compute-sanitizer memcheck on a tiny Qwen3-MoE and a tiny Qwen2
# with them on, then tg128 (P=512: pp512 too) with them on (`on`; `ono`: the output projection too)
# against off, alternated: the 12-layer 30B-A3B slice,
# Qwen2-0.5B Q4_0 and Qwen2-7B Q4_0 (two rounds each; ROUNDS to change), and with MOE48=1 the
# whole 48-layer 30B-A3B file (one round; 17 GiB synthesized first, ~2 minutes).
set -uo pipefail
out=${1:-/tmp/minfer-ffn}; mkdir -p "$out"
[ -f .gpu/build/bin/libminfer_backend_cuda.so ] || bash .gpu/unpack.sh
bin=$PWD/.gpu/build/bin
export MINFER_TESTDATA=$PWD/.gpu/testdata
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"
timeout 240 "$bin/minfer-tests" --gtest_filter='CudaVsCpuArchs.OneLaunch*:Explain.CudaNamesPathsAndFusions' > "$out/tests.log" 2>&1
echo "tests rc=$?"
grep -E '^\[  (FAILED|PASSED)|Failure|rel diff|Expected|Which is' "$out/tests.log" | head -30
printf 'backends: {cuda: {moe_ffn_fused: true, dense_ffn_fused: true, attn_out_fused: true}}\nprompt: "one two three four five six seven eight nine ten"\ncontext: 256\ngeneration: {n_predict: 8}\n' \
  > "$out/on.yaml"
for arch in qwen3moe qwen2; do
  "$bin/minfer-gguf" synth --arch $arch --preset tiny --type q4_k_m --seed 3 -o /tmp/minfer-ffn-$arch.gguf > /dev/null 2>&1
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 "$bin/minfer-app" --config "$out/on.yaml" -m /tmp/minfer-ffn-$arch.gguf \
    > "$out/memcheck-$arch.log" 2>&1
  echo "memcheck $arch rc=$?"
  tail -n 2 "$out/memcheck-$arch.log"
  grep -h "one-launch kernel reads them" "$out/memcheck-$arch.log"  # a refusal at run time (addresses), said once
done
# SIDES: more sides beside these (another plugin with the options on: SIDES="off=new on=new x=NAME", OPTS_x as OPTS_on).
export SIDES="${SIDES:-off=new on=new ono=new}" OPTS_on="moe_ffn_fused: true, dense_ffn_fused: true"
export OPTS_ono="moe_ffn_fused: true, dense_ffn_fused: true, attn_out_fused: true"
P=${P:-0} MODELS="${MODELS:-moe12:q4_k_m 0.5b:q4_0 7b:q4_0}" timeout 330 bash scripts/gpu-ab-plugins.sh "$out/ab" "${ROUNDS:-2}" > "$out/ab.log" 2>&1
grep -E 't/s \(' "$out/ab.log"
if [ "${MOE48:-0}" = 1 ]; then
  MODELS=moe48:q4_k_m timeout 300 bash scripts/gpu-ab-plugins.sh "$out/ab48" 1 > "$out/ab48.log" 2>&1
  grep -E 't/s \(' "$out/ab48.log"
fi
