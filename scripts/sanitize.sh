#!/usr/bin/env bash
# The host code under a sanitizer, in its own build directory, and the tests that exercise it.
#   bash scripts/sanitize.sh address,undefined [CTEST_ARGS...]   -> build-asan
#   bash scripts/sanitize.sh thread [CTEST_ARGS...]              -> build-tsan
# Without CTEST_ARGS: every test (ASan: all of them but app_generate, whose peak-RSS bound
# cannot hold with ASan's shadow memory; TSan: the threaded ones: engine, batching, server).
# A finding fails its test (halt on error; the server tests check the exit status, 66 under
# TSan) and its report lands in BUILD_DIR/sanitizer-logs.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?"give address,undefined or thread"}
shift
case "$kind" in
  thread) build=${BUILD_DIR:-build-tsan}; default=(-R "EngineTest|Scheduler|PagePool|StoriesBatch.*cpu|SynthBatch.*cpu_q8_0|KvTypes/Stories.*cpu|^server|app_batch|app_chat") ;;
  *address*|*undefined*) build=${BUILD_DIR:-build-asan}; default=(-E "app_generate") ;;
  *) echo "sanitize.sh: unknown sanitizer '$kind'" >&2; exit 2 ;;
esac
bash scripts/setup.sh --packages
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMINFER_CUDA=OFF -DMINFER_SANITIZE="$kind"
fi
cmake --build "$build"
logs="$PWD/$build/sanitizer-logs"
rm -rf "$logs" && mkdir -p "$logs"
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:log_path=$logs/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:log_path=$logs/tsan"
cd "$build"
[ $# -gt 0 ] && args=("$@") || args=("${default[@]}")
status=0
ctest -j "$(nproc)" --timeout 1500 --output-on-failure "${args[@]}" || status=$?
if compgen -G "$logs/*" >/dev/null; then
  echo "sanitize.sh: reports in $logs:"
  grep -h "^SUMMARY" "$logs"/* | sort | uniq -c
  status=1
fi
exit $status
