#!/usr/bin/env bash
# Fuzzes one of minfer's readers with clang's libFuzzer under ASan and UBSan.
#   bash scripts/fuzz.sh [TARGET=gguf] [SECONDS=600]
# TARGET: gguf (the GGUF reader), tokenizer (encode/decode with every vocabulary of the test
# data), config (YAML -> RunConfig), template (chat-template text -> parse and render), grammar
# (GBNF text -> compile, follow a reply, token masks), schema (a JSON schema -> compile, follow a
# reply, token masks), request (a request body -> the server's fields, or a BadRequest). Builds
# into build-fuzz/TARGET/, seeds it, keeps the
# growing corpus in build-fuzz/TARGET/corpus (reused by the next run) and any crash there.
set -euo pipefail
cd "$(dirname "$0")/.."
target=gguf
if [ $# -gt 0 ] && ! [[ $1 =~ ^[0-9]+$ ]]; then target=$1; shift; fi
secs=${1:-600}
case $target in gguf | tokenizer | config | template | grammar | schema | request) ;; *) echo "fuzz.sh: unknown target '$target' (gguf, tokenizer, config, template, grammar, schema, request)" >&2; exit 2 ;; esac

if ! command -v clang++ >/dev/null || ! dpkg-query -W libclang-rt-14-dev >/dev/null 2>&1 || ! dpkg-query -W libyaml-cpp-dev >/dev/null 2>&1 ||
  ! dpkg-query -W nlohmann-json3-dev >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq clang libclang-rt-14-dev libyaml-cpp-dev nlohmann-json3-dev >/dev/null
fi
testdata=$(cd .. && pwd)/shared/testdata
out=build-fuzz/$target
mkdir -p "$out/corpus" "$out/seeds"
flags=(-std=c++20 -O1 -g -Icore -Isdk/include -Itests -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
gguf_src=(core/gguf/gguf.cpp core/gguf/value.cpp)
# The constraints: json_constraint.cpp also builds a vocabulary from a tokenizer.
constraint_src=(core/sampling/gbnf.cpp core/sampling/json_constraint.cpp core/sampling/json_schema.cpp core/sampling/json_schema_compile.cpp
  core/sampling/regex.cpp core/tokenizer/*.cpp "${gguf_src[@]}")
max_len=65536
case $target in
  gguf)
    clang++ "${flags[@]}" "${gguf_src[@]}" tests/fuzz/gguf_reader_fuzz.cpp -o "$out/fuzz"
    clang++ -std=c++20 -O1 -Itests tests/fuzz/make_seed_corpus.cpp -o "$out/make_seed_corpus"
    "$out/make_seed_corpus" "$out/seeds" "$testdata"
    ;;
  tokenizer)
    clang++ "${flags[@]}" "${gguf_src[@]}" core/tokenizer/*.cpp tests/fuzz/tokenizer_fuzz.cpp -o "$out/fuzz"
    # Seeds: the tokenizer test texts, each for a few vocabularies and option bits.
    python3 - "$testdata" "$out/seeds" <<'EOF'
import glob, os, sys
td, seeds = sys.argv[1], sys.argv[2]
texts = []
for inp in sorted(glob.glob(os.path.join(td, "vocab", "*.inp"))):
    texts += open(inp, encoding="utf-8", errors="replace").read().split("\n__ggml_vocab_test__\n")
texts = sorted(set(t for t in texts if t))[:400]
for i, t in enumerate(texts):
    with open(os.path.join(seeds, f"t{i}"), "wb") as f:
        f.write(bytes([i % 16, i % 8]) + t.encode("utf-8"))
EOF
    export MINFER_TESTDATA=$testdata
    max_len=4096
    ;;
  config)
    # A config's grammar or json_schema is compiled while it is read: the constraints' sources too.
    clang++ "${flags[@]}" core/config/run_config.cpp "${constraint_src[@]}" tests/fuzz/run_config_fuzz.cpp -lyaml-cpp -o "$out/fuzz"
    i=0
    for f in configs/*.yaml examples/*/*.yaml tests/data/*.yaml; do cp "$f" "$out/seeds/s$i.yaml"; i=$((i + 1)); done
    max_len=4096
    ;;
  template)
    clang++ "${flags[@]}" core/chat/jinja/*.cpp core/tokenizer/unicode.cpp core/tokenizer/unicode_tables.cpp \
      tests/fuzz/template_fuzz.cpp -o "$out/fuzz"
    cp "$testdata"/templates/*.jinja "$out/seeds/" 2>/dev/null || true
    max_len=20000
    ;;
  grammar)
    clang++ "${flags[@]}" "${constraint_src[@]}" tests/fuzz/grammar_fuzz.cpp -o "$out/fuzz"
    python3 tests/fuzz/fuzz_seeds.py grammar "$out/seeds"
    ;;
  schema)
    clang++ "${flags[@]}" "${constraint_src[@]}" tests/fuzz/schema_fuzz.cpp -o "$out/fuzz"
    python3 tests/fuzz/fuzz_seeds.py schema "$out/seeds"
    ;;
  request)
    clang++ "${flags[@]}" -Iapps/minfer-server apps/minfer-server/openai.cpp core/sampling/*.cpp core/chat/*.cpp core/chat/jinja/*.cpp \
      core/tokenizer/*.cpp "${gguf_src[@]}" tests/fuzz/request_fuzz.cpp -o "$out/fuzz"
    python3 tests/fuzz/fuzz_seeds.py request "$out/seeds"
    ;;
esac
cd "$out"
./fuzz -max_total_time="$secs" -max_len="$max_len" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 corpus seeds
