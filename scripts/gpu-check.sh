#!/usr/bin/env bash
# Runs the CUDA checks on a GPU machine from a bundle made by ../shared/tools/gpu-bundle.sh:
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64; bash scripts/gpu-check.sh .gpu OUTDIR
# Writes one log per step into OUTDIR and prints a summary last. MINFER_GPU_BENCH=0 skips the
# benchmark (it synthesizes a Qwen2-0.5B Q4_0 first).
set -uo pipefail
bundle=${1:-.gpu}; out=${2:-/tmp/minfer-gpu}; mkdir -p "$out"
bin=$bundle/build/bin
export MINFER_TESTDATA=$PWD/$bundle/testdata
summary=()
step() {  # step NAME COMMAND...: run, log, remember the outcome
  local name=$1; shift
  local t0=$(date +%s%N)
  "$@" >"$out/$name.log" 2>&1; local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  summary+=("$(printf '%-26s rc=%-3s %8d ms' "$name" "$rc" "$ms")")
}
# The configs read ../shared/testdata; on the GPU machine the bundle carries a copy.
mkdir -p ../shared && [ -e ../shared/testdata ] || ln -s "$PWD/$bundle/testdata" ../shared/testdata
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1
step list_backends "$bin/minfer-app" --list-backends
step conformance "$bin/minfer-op-conformance" --gtest_filter='Backends/*cuda*:ConformanceCoverage.*'
step tests "$bin/minfer-tests" --gtest_filter='Placement.*:Loader.*:KvTypes*:GeneratorLogits.*:AllTypes/CudaVsCpu*:CudaVsCpuWide.*:CudaVsCpuArchs.*:Explain.*:Files/ArchReference*cuda*:*StoriesBatch*:*SynthBatch*cuda*'
command -v python3 >/dev/null && step app_batch_cuda python3 tests/check_app_batch.py "$bin/minfer-app" /tmp/minfer-app-batch configs/cuda.yaml
command -v python3 >/dev/null && step server_cuda python3 tests/check_server.py "$bin/minfer-server" configs/cuda.yaml
command -v python3 >/dev/null && step server_corpus_cuda python3 tests/check_server_corpus.py "$bin/minfer-server" configs/cuda.yaml
# The real clients need node, the npm packages (carried in the bundle's build/node-tests, when
# there) and chromium; rc=77 is their skip, with the reason in the log.
command -v python3 >/dev/null && step server_clients_cuda python3 tests/check_server_clients.py "$bin/minfer-server" "$bundle/build/node-tests" "$out/clients" configs/cuda.yaml
step ops_demo_cuda "$bin/minfer-app" --config configs/ops-demo-cuda.yaml
step ops_demo_mixed "$bin/minfer-app" --config configs/ops-demo-mixed.yaml
step generate_cuda "$bin/minfer-app" --config configs/cuda.yaml -n 48 --temp 0
step generate_mixed "$bin/minfer-app" --config configs/mixed.yaml -n 48
step explain_mixed "$bin/minfer-app" --config configs/mixed.yaml --explain
export MINFER_TRACE=$out/trace_cuda.json
step trace_cuda "$bin/minfer-app" --config configs/cuda.yaml -n 6 --temp 0
unset MINFER_TRACE
command -v python3 >/dev/null && step trace_schema python3 tests/validate_trace.py docs/trace.schema.json "$out/trace_cuda.json"
if command -v compute-sanitizer >/dev/null; then
  # The reduced suite: every kernel family's conformance cases, then a whole synthetic Qwen2
  # (Q4_0: MMQ prefill, fused decode steps, both attention kernels) generating a few tokens.
  MINFER_CONFORMANCE_OPS=matmul,attention,rms_norm,rope,swiglu,geglu,scale,get_rows,dequantize,top_k,moe_weights,matmul_id,moe_sum step memcheck \
    compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$bin/minfer-op-conformance" --gtest_filter='Backends/Conformance.EveryOpDtypeShape/cuda'
  "$bin/minfer-gguf" synth --arch qwen2 --preset tiny --type q4_0 --seed 3 -o /tmp/minfer-tiny-q4_0.gguf > /dev/null 2>&1
  printf 'backends: {cuda: {}}\nprompt: "one two three four five six seven eight nine ten"\ncontext: 256\ngeneration: {n_predict: 8}\n' \
    > /tmp/minfer-tiny.yaml
  step memcheck_model compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$bin/minfer-app" --config /tmp/minfer-tiny.yaml -m /tmp/minfer-tiny-q4_0.gguf
  # The same model with six prompts, four at a time: batched steps over the paged cache
  # (mixed prefill chunks and decode tokens, several sequences per decode step).
  printf 'one two three\nfour five six seven eight nine ten eleven\ntwelve\nthirteen fourteen fifteen sixteen\nseventeen\neighteen nineteen twenty\n' \
    > /tmp/minfer-tiny-prompts.txt
  step memcheck_batch compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$bin/minfer-app" --config /tmp/minfer-tiny.yaml -m /tmp/minfer-tiny-q4_0.gguf --prompt-file /tmp/minfer-tiny-prompts.txt --parallel 4 -n 12
fi
if [ "${MINFER_GPU_BENCH:-1}" != 0 ]; then
  step synth "$bin/minfer-gguf" synth --arch qwen2 --preset 0.5b --type q4_0 --seed 1 \
    --vocab "$bundle/testdata/vocab/ggml-vocab-qwen2.gguf" -o /tmp/qwen2-0.5b-q4_0.gguf
  printf 'backends: {cuda: {}}\n' > /tmp/cuda-bench.yaml
  step bench_cuda "$bin/minfer-bench" -m /tmp/qwen2-0.5b-q4_0.gguf --config /tmp/cuda-bench.yaml -p 512 -n 128 -r 3
fi
cat "$out/gpu.txt"
grep -h -E '^conformance\[|PASSED|FAILED|ERROR SUMMARY|cuda_f|mixed_f|agreement' "$out"/conformance.log "$out"/tests.log "$out"/memcheck.log "$out"/memcheck_model.log "$out"/memcheck_batch.log 2>/dev/null | grep -v "^\[ *OK" | head -40
tail -n 3 "$out/generate_cuda.log" "$out/generate_mixed.log" "$out/bench_cuda.log" "$out/trace_schema.log" 2>/dev/null
command -v python3 >/dev/null && python3 -c "import json,sys; t=json.load(open(sys.argv[1])); r=t['steps'][1]['nodes']; print('cuda trace clocks:', sorted(set(x['clock'] for x in r)), 'decode step node ms total: %.3f' % sum(x['ms'] for x in r))" "$out/trace_cuda.json"
printf '%s\n' "${summary[@]}"
