#!/usr/bin/env bash
# Fuzzes the GGUF reader with clang's libFuzzer under ASan and UBSan.
#   bash scripts/fuzz.sh [SECONDS=600]
# Builds into build-fuzz/, seeds from the hand-made corpus and ../shared/testdata, keeps the
# growing corpus in build-fuzz/corpus (reused by the next run) and any crash in build-fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
if ! command -v clang++ >/dev/null || ! dpkg-query -W libclang-rt-14-dev >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq clang libclang-rt-14-dev >/dev/null
fi
out=build-fuzz
mkdir -p "$out/corpus" "$out/seeds"
flags=(-std=c++20 -O1 -g -Icore -Isdk/include -Itests)
clang++ "${flags[@]}" -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  core/gguf/gguf.cpp core/gguf/value.cpp tests/fuzz/gguf_reader_fuzz.cpp -o "$out/gguf_reader_fuzz"
clang++ "${flags[@]}" tests/fuzz/make_seed_corpus.cpp -o "$out/make_seed_corpus"
"$out/make_seed_corpus" "$out/seeds" ../shared/testdata
cd "$out"
./gguf_reader_fuzz -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 corpus seeds
