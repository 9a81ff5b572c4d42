#!/bin/bash
# Few-token matmul paths on a GPU (minfer-bench --op): for each weight type and 7B shape
# (gate, down, QKV) at 1-64 tokens, the time of the few-token dp4a GEMV (mmq_min_tokens: 65),
# of MMQ from 2 tokens (mmq_min_tokens: 2), both with few_token_mma off, and of the default
# choice (few_token_mma.cu where it takes the type).
#   export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64; bash scripts/gpu-fewtoken-sweep.sh [.gpu]
# TYPES, TOKENS and SHAPES ("k rows" pairs, comma-separated) narrow the sweep.
B=${1:-.gpu}/build/bin
printf 'backends: {cuda: {mmq_min_tokens: 65, few_token_mma: false}}\n' > /tmp/gemv.yaml
printf 'backends: {cuda: {mmq_min_tokens: 2, few_token_mma: false}}\n' > /tmp/mmq.yaml
printf 'backends: {cuda: {}}\n' > /tmp/default.yaml
us() { "$B/minfer-bench" --op matmul --type "$1" -k "$2" --rows "$3" --tokens "$4" -r 30 --config "$5" 2>&1 | grep -o '[0-9.]* us/call'; }
IFS=, read -r -a shapes <<< "${SHAPES:-3584 18944,18944 3584,3584 4608}"
for t in ${TYPES:-q4_0 q8_0 q4_k q6_k}; do
  for shape in "${shapes[@]}"; do
    set -- $shape
    for T in ${TOKENS:-1 2 4 8 16 32 64}; do
      echo "$t k=$1 rows=$2 T=$T gemv: $(us $t $1 $2 $T /tmp/gemv.yaml) | mmq: $(us $t $1 $2 $T /tmp/mmq.yaml) | default: $(us $t $1 $2 $T /tmp/default.yaml)"
    done
  done
done
