#!/bin/bash
# Few-token matmul paths on a GPU (minfer-bench --op): for each weight type and 7B shape
# (gate, down, QKV) at 1-16 tokens, the time of the few-token GEMV (mmq_min_tokens: 16), of
# the default choice (by weight type) and of MMQ from 2 tokens (mmq_min_tokens: 2).
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64; bash scripts/gpu-fewtoken-sweep.sh [.gpu]
# TYPES and TOKENS (space-separated) narrow the sweep.
B=${1:-.gpu}/build/bin
printf 'backends: {cuda: {mmq_min_tokens: 16}}\n' > /tmp/gemv.yaml
printf 'backends: {cuda: {}}\n' > /tmp/default.yaml
printf 'backends: {cuda: {mmq_min_tokens: 2}}\n' > /tmp/mmq.yaml
us() { "$B/minfer-bench" --op matmul --type "$1" -k "$2" --rows "$3" --tokens "$4" -r 30 --config "$5" 2>&1 | grep -o '[0-9.]* us/call'; }
for t in ${TYPES:-q4_0 q8_0 q4_k q6_k}; do
  for shape in "3584 18944" "18944 3584" "3584 4608"; do
    set -- $shape
    for T in ${TOKENS:-1 2 4 6 8 12 16}; do
      echo "$t k=$1 rows=$2 T=$T gemv: $(us $t $1 $2 $T /tmp/gemv.yaml) | default: $(us $t $1 $2 $T /tmp/default.yaml) | mmq: $(us $t $1 $2 $T /tmp/mmq.yaml)"
    done
  done
done
