#!/usr/bin/env bash
# Decides cuda options that are off by default in one device call, from a bundle made by
# scripts/gpu-pack-plugins.sh:
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
#   TESTS='CudaVsCpuArchs.OneLaunch*' ON='dense_ffn_fused: true' bash scripts/gpu-options-check.sh OUT
# 1. their tests (TESTS, a gtest filter; its logs in OUT/tests.log);
# 2. compute-sanitizer memcheck of minfer-app with the options ON on two-layer synthetic models
#    (MEMCHECK: ARCH/PRESET:TYPE specs, default the 0.5B at Q4_0 and Q4_K_M: its 4,864-wide
#    down rows and 151,936-row lm_head), with any "one-launch kernel reads them" refusal shown;
# 3. tg128 (P=512: pp512 too) with them on (side `on`) against off, alternated (MODELS, ROUNDS;
#    more sides: SIDES and OPTS_x as scripts/gpu-ab-plugins.sh, e.g. SIDES="off=new on=new x=new"
#    OPTS_x="attn_out_fused: true").
# The one-launch FFNs were decided with TESTS='CudaVsCpuArchs.OneLaunch*:Explain.CudaNamesPathsAndFusions'
# ON='moe_ffn_fused: true, dense_ffn_fused: true, attn_out_fused: true'
# MEMCHECK='qwen3moe/tiny:q4_k_m qwen2/tiny:q4_k_m' MODELS='moe12:q4_k_m 0.5b:q4_0 7b:q4_0'.
# Stop 73's two (unmeasured when written): TESTS='CudaVsCpuArchs.StagedTwin*:CudaVsCpuArchs.StagedShortRows*'
# ON='staged_twin_blocks: true, staged_short_rows_from: 512' MEMCHECK='qwen2/0.5b:q4_0 qwen2/7b:q4_0'
# SIDES="off=new t=new s=new s4=new" OPTS_t="staged_twin_blocks: true" OPTS_s="staged_short_rows_from: 512"
# OPTS_s4="staged_short_rows_from: 4096" MODELS='0.5b:q4_0 0.5b:q8_0 7b:q4_0'; and the experts' one:
# TESTS='CudaVsCpuArchs.StagedExpertPairs*:Explain.CudaNamesPathsAndFusions' ON='staged_expert_pairs: true'
# MEMCHECK='qwen3moe/tiny:q4_k_m qwen3moe/tiny:q4_0' MODELS='moe12:q4_k_m'.
set -uo pipefail
out=${1:-/tmp/minfer-options}; mkdir -p "$out"
: "${ON:?ON: the options to decide, as YAML map entries (ON='dense_ffn_fused: true')}"
[ -f .gpu/build/bin/libminfer_backend_cuda.so ] || bash .gpu/unpack.sh
bin=$PWD/.gpu/build/bin
export MINFER_TESTDATA=$PWD/.gpu/testdata
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"
if [ -n "${TESTS:-}" ]; then
  timeout 240 "$bin/minfer-tests" --gtest_filter="$TESTS" > "$out/tests.log" 2>&1
  echo "tests rc=$?"
  grep -E '^\[  (FAILED|PASSED|SKIPPED)|Failure|rel diff|Expected|Which is' "$out/tests.log" | head -30
fi
printf 'backends: {cuda: {%s}}\nprompt: "one two three four five six seven eight nine ten"\ncontext: 256\ngeneration: {n_predict: 8}\n' "$ON" > "$out/on.yaml"
for spec in ${MEMCHECK:-qwen2/0.5b:q4_0 qwen2/0.5b:q4_k_m}; do
  arch=${spec%%/*}; rest=${spec#*/}; preset=${rest%%:*}; type=${rest##*:}
  f=/tmp/minfer-memcheck-$arch-$preset-$type.gguf
  "$bin/minfer-gguf" synth --arch "$arch" --preset "$preset" --layers 2 --type "$type" --seed 3 -o "$f" > /dev/null 2>&1
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 1 "$bin/minfer-app" --config "$out/on.yaml" -m "$f" \
    > "$out/memcheck-$arch-$preset-$type.log" 2>&1
  echo "memcheck $spec rc=$?"
  tail -n 2 "$out/memcheck-$arch-$preset-$type.log"
  grep -h "one-launch kernel reads them" "$out/memcheck-$arch-$preset-$type.log"  # a refusal at run time (addresses), said once
done
export SIDES="${SIDES:-off=new on=new}" OPTS_on="$ON"
P=${P:-0} MODELS="${MODELS:-0.5b:q4_0 7b:q4_0 7b:q4_k_m}" timeout 330 bash scripts/gpu-ab-plugins.sh "$out/ab" "${ROUNDS:-2}" > "$out/ab.log" 2>&1
grep -E 't/s \(' "$out/ab.log"
