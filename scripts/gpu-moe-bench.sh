export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
B=.gpu/build/bin; M=/tmp/moe30.gguf
V=.gpu/testdata/vocab/ggml-vocab-qwen2.gguf
( time $B/minfer-gguf synth --arch qwen3moe --preset 30b-a3b --type q4_k_m --seed 1 --vocab $V -o $M ) 2>&1 | tail -4
printf 'backends: {cuda: {}}\n' > /tmp/cuda.yaml
printf 'backends: {cuda: {}, cpu: {threads: 16}}\nplacement: {default: cuda, experts: cpu}\n' > /tmp/split.yaml
$B/minfer-bench -m $M --config /tmp/cuda.yaml -p 512 -n 128 -r 3 2>&1 | tail -3
$B/minfer-bench -m $M --config /tmp/split.yaml -p 128 -n 32 -r 1 2>&1 | tail -3
