#!/usr/bin/env bash
# Issue 22's figures on a machine of two or more GPUs (nvidia-h200-x2 and larger), from a bundle:
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64; bash scripts/gpu-multi-bench.sh .gpu OUTDIR
# Runs the multi-GPU tests (TensorParallelCuda.*: one rank through NCCL, the layer and tensor
# splits' tokens against one GPU), then synthetic Qwen2-7B Q4_0 on one GPU, layers over two
# and tensor parallel over two: minfer-bench -p 512 -n 128, and --parallel 1,64 (aggregate
# decode). Done when tp2 tg128 >= 1.35x one GPU's and S_TG at 64 >= 1.7x (issue 22).
set -uo pipefail
# NVLink multicast (NVLS) stays off: on the shared hosts it can take their GPUs out of service
# (the device tool's KINDS.md). The machine sets it; set it here too in case a shell does not.
export NCCL_NVLS_ENABLE=0
# The cuda plugin loads libnccl.so.2 when split: tensor opens its group: the toolkit's, else the
# one PyTorch's nvidia-nccl wheel brings.
if [ ! -e /usr/local/cuda/lib64/libnccl.so.2 ]; then
  nccl_lib=$(python3 -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$nccl_lib" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$nccl_lib
fi
bundle=${1:-.gpu}; out=${2:-/tmp/minfer-multi}; mkdir -p "$out"
bin=$bundle/build/bin
vocab=$bundle/testdata/vocab/ggml-vocab-qwen2.gguf
models=/tmp/minfer-models; mkdir -p "$models"
nvidia-smi topo -m > "$out/topo.txt" 2>&1
"$bin/minfer-tests" --gtest_filter='TensorParallel*:Placement.*' > "$out/tests.log" 2>&1; echo "tests rc=$?" >> "$out/tests.log"
f=$models/qwen2-7b-q4_0.gguf
[ -f "$f" ] || "$bin/minfer-gguf" synth --arch qwen2 --preset 7b --type q4_0 --seed 1 --vocab "$vocab" -o "$f" >> "$out/synth.log" 2>&1
printf 'backends: {cuda: {}}\n' > "$out/one.yaml"
gpus='backends: {gpu0: {plugin: cuda, device: 0}, gpu1: {plugin: cuda, device: 1}}\n'
printf "${gpus}placement: {split: layer, devices: [gpu0, gpu1]}\n" > "$out/layer2.yaml"
printf "${gpus}placement: {split: tensor, devices: [gpu0, gpu1]}\n" > "$out/tp2.yaml"
"$bin/minfer-bench" -m "$f" --config "$out/one.yaml" -p 512 -n 128 -r 3 > /dev/null 2>&1  # warm-up, unrecorded
: > "$out/bench.md"
for round in 1 2; do  # alternated, two rounds
  for c in one layer2 tp2; do
    echo "## $c round $round" >> "$out/bench.md"
    "$bin/minfer-bench" -m "$f" --config "$out/$c.yaml" -p 512 -n 128 -r 3 2>&1 | tail -n 2 >> "$out/bench.md"
  done
done
for c in one tp2; do
  echo "## $c --parallel 1,64" >> "$out/bench.md"
  "$bin/minfer-bench" -m "$f" --config "$out/$c.yaml" --parallel 1,64 --npp 512 --ntg 128 2>&1 | tail -n 3 >> "$out/bench.md"
done
"$bin/minfer-bench" -m "$f" --config "$out/tp2.yaml" -p 16 -n 4 -r 1 > "$out/tp2.log" 2>&1
grep -m1 NCCL "$out/tp2.log" >> "$out/bench.md"  # the version, as the plugin logs it at group open
cat "$out/tests.log" | tail -5; cat "$out/bench.md"
