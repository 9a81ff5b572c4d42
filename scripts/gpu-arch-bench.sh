#!/usr/bin/env bash
# The architectures' speed on a GPU machine, from a bundle (see docs/BUILD.md):
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64; bash scripts/gpu-arch-bench.sh .gpu OUTDIR [ARCH/PRESET:TYPE ...]
# Synthesizes each model at its real shapes (default: Qwen3-8B and Gemma-2-2B in Q4_K_M, then
# Gemma-3-4B and Llama-3.1-8B) and runs minfer-bench -p 512 -n 128 on CUDA.
set -uo pipefail
bundle=${1:-.gpu}; out=${2:-/tmp/minfer-arch-bench}; shift 2 2>/dev/null || true
mkdir -p "$out"
bin=$bundle/build/bin
models=/tmp/minfer-models; mkdir -p "$models"
specs=("$@"); [ ${#specs[@]} -gt 0 ] || specs=(qwen3/8b:q4_k_m gemma2/2b:q4_k_m gemma3/4b:q4_k_m llama/3.1-8b:q4_k_m)
printf 'backends: {cuda: {}}\n' > "$out/cuda.yaml"
: > "$out/bench.md"
for spec in "${specs[@]}"; do
  arch=${spec%%/*}; rest=${spec#*/}; preset=${rest%%:*}; type=${rest##*:}
  f=$models/$arch-$preset-$type.gguf
  [ -f "$f" ] || "$bin/minfer-gguf" synth --arch "$arch" --preset "$preset" --type "$type" --seed 1 -o "$f" >> "$out/synth.log" 2>&1
  echo "## $arch $preset $type" >> "$out/bench.md"
  "$bin/minfer-bench" -m "$f" --config "$out/cuda.yaml" -p 512 -n 128 -r 3 2>&1 | tail -n 2 >> "$out/bench.md"
done
cat "$out/bench.md"
