#!/bin/sh
# minfer-app generating text as a user runs it (from the repository root, as the README does).
set -u
app=$1; work=$2
fail() { echo "FAIL: $1"; exit 1; }
mkdir -p "$work"
if [ -f ../shared/testdata/models/stories260K.gguf ]; then
  out=$("$app" --config configs/cpu.yaml -n 24 --temp 0 --json) || fail "cpu.yaml run: $out"
  echo "$out"
  echo "$out" | grep -q '"prompt_tokens":5' || fail "stories prompt tokens"
  echo "$out" | grep -q 'there was a little girl named Lily' || fail "stories greedy text"
  echo "$out" | grep -q '"decode_tok_s":[0-9]' || fail "timings in --json"
  # --grammar and --json-schema hold the reply (llama-cli's flags); a broken one says where
  out=$("$app" --config configs/cpu.yaml -n 30 --temp 0 --json --grammar 'root ::= [A-Z] [a-z]+ " " [0-9]{3}') || fail "--grammar run: $out"
  echo "$out" | grep -Eq '"text":"[A-Z][a-z]+ [0-9]{3}"' || fail "--grammar text: $out"
  out=$("$app" --config configs/cpu.yaml -n 60 --temp 0 --json -j '{"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}') ||
    fail "--json-schema run: $out"
  echo "$out" | grep -Eq '"text":"\{ ?\\"age\\" ?: ?-?[0-9]+ ?\}"' || fail "--json-schema text: $out"
  msg=$("$app" --config configs/cpu.yaml -n 4 --grammar 'root ::= [a-' 2>&1) && fail "a broken grammar must fail"
  echo "$msg" | grep -q "closing ']' of the class at line 1, column 10" || fail "broken grammar message: $msg"
  # a prompt longer than the context is refused with a message that says what to do
  long=$(yes "word" | head -n 300 | tr '\n' ' ')
  msg=$(printf 'model: ../shared/testdata/models/stories260K.gguf\nbackends: {cpu: {}}\ncontext: 64\n' > "$work/ctx.yaml"; "$app" --config "$work/ctx.yaml" -p "$long" 2>&1)
  echo "$msg" | grep -q "but the context holds 64; shorten it or raise 'context'" || fail "long prompt message: $msg"
  msg=$("$app" --config "$work/ctx.yaml" -m ../shared/testdata/vocab/ggml-vocab-gpt-2.gguf -p hi 2>&1)
  echo "$msg" | grep -q "architecture 'gpt2' is not supported" || fail "unsupported architecture message: $msg"
else
  echo "note: ../shared/testdata not found; skipping the stories260K checks"
fi
printf 'model: %s/missing.gguf\nbackends: {cpu: {}}\nprompt: hi\n' "$work" > "$work/missing.yaml"
msg=$("$app" --config "$work/missing.yaml" 2>&1) && fail "a missing model must fail"
echo "$msg" | grep -q "missing.gguf: model file not found" || fail "missing model message: $msg"
echo "not a model" > "$work/text.gguf"
msg=$("$app" --config "$work/missing.yaml" -m "$work/text.gguf" 2>&1) && fail "a non-GGUF file must fail"
echo "$msg" | grep -q "not a GGUF file" || fail "non-GGUF message: $msg"
# The README's run config: a synthesized model, made on first run, then reused.
out=$("$app" --config configs/demo.yaml -n 8 --json) || fail "demo.yaml: $out"
echo "$out" | grep -q '"tokens":8' || fail "demo.yaml generated no tokens: $out"
# Peak memory of a CPU run: within 1.2 x the model file plus the KV cache (issue 4), for a
# Qwen2-0.5B Q4_0 and a prompt longer than one 512-token batch.
vocab=""
[ -f ../shared/testdata/vocab/ggml-vocab-qwen2.gguf ] && vocab="--vocab ../shared/testdata/vocab/ggml-vocab-qwen2.gguf"
model=$work/qwen2-0.5b-q4_0.gguf
[ -f "$model" ] || "$(dirname "$app")/minfer-gguf" synth --arch qwen2 --preset 0.5b --type q4_0 --seed 1 $vocab -o "$model" > /dev/null ||
  fail "synthesizing the 0.5B model"
long=$(seq 0 164 | sed 's/^/word/' | tr '\n' ' ')
printf 'backends: {cpu: {}}\ncontext: 2048\nkv_type: f16\ngeneration: {n_predict: 4}\n' > "$work/rss.yaml"
out=$("$app" --config "$work/rss.yaml" -m "$model" -p "$long" --json) || fail "0.5B run: $out"
peak=$(echo "$out" | sed 's/.*"peak_rss_mb":\([0-9.e+]*\).*/\1/')
prompt=$(echo "$out" | sed 's/.*"prompt_tokens":\([0-9]*\).*/\1/')
bytes=$(wc -c < "$model")
# KV cache: 2048 positions x 24 layers x (K + V) x 128 values x 2 bytes
bound=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", (1.2 * b + 2048 * 24 * 2 * 128 * 2) / 1e6 }')
echo "peak RSS ${peak} MB for a ${prompt}-token prompt; bound ${bound} MB"
awk -v p="$peak" -v b="$bound" 'BEGIN { exit !(p > 0 && p <= b) }' || fail "peak RSS ${peak} MB exceeds ${bound} MB"
printf 'backends: {cpu: {weights: shared}}\nprompt: hi\n' > "$work/badweights.yaml"
msg=$("$app" --config "$work/badweights.yaml" -m "$work/qwen2-0.5b-q4_0.gguf" 2>&1) && fail "a bad weights option must fail"
echo "$msg" | grep -q "option 'weights' of backend 'cpu' has value 'shared'; expected copy or mapped" || fail "weights option message: $msg"
echo "minfer-app generate OK"
