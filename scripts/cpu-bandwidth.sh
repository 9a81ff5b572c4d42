#!/usr/bin/env bash
# How fast this machine streams memory: the ceiling for CPU decode, which reads every weight
# once per token (tokens/s <= bandwidth / model bytes). Reads a buffer of MB megabytes with
# the widest loads the CPU has (AVX-512, else AVX2), 30 passes, on 1 and 2 threads.
#   bash scripts/cpu-bandwidth.sh [MB=350]
set -euo pipefail
mb=${1:-350}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/bw.c" <<'C'
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static size_t size; static char *buf; static int threads;
static void *pass(void *arg) {
  const size_t part = size / threads; const char *b = buf + (long)arg * part;
#ifdef __AVX512F__
  __m512i acc = _mm512_setzero_si512();
  for (int r = 0; r < 30; r++)
    for (size_t i = 0; i < part; i += 256)
      for (int k = 0; k < 256; k += 64) acc = _mm512_add_epi32(acc, _mm512_load_si512(b + i + k));
  return (void *)(long)_mm512_reduce_add_epi32(acc);
#else
  __m256i acc = _mm256_setzero_si256();
  for (int r = 0; r < 30; r++)
    for (size_t i = 0; i < part; i += 128)
      for (int k = 0; k < 128; k += 32) acc = _mm256_add_epi32(acc, _mm256_load_si256((const __m256i *)(b + i + k)));
  return (void *)(long)_mm256_extract_epi32(acc, 0);
#endif
}
int main(int argc, char **argv) {
  size = (size_t)atol(argv[1]) << 20; buf = aligned_alloc(64, size); memset(buf, 1, size);
  for (threads = 1; threads <= 2; threads++) {
    struct timespec t0, t1; pthread_t th[2];
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < threads; i++) pthread_create(&th[i], 0, pass, (void *)i);
    for (int i = 0; i < threads; i++) pthread_join(th[i], 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("%zu MB, %d thread(s): %.1f GB/s\n", size >> 20, threads, (double)(size / threads * threads) * 30 / s / 1e9);
  }
  return 0;
}
C
isa=-mavx2
grep -q avx512f /proc/cpuinfo && isa=-mavx512f
cc -O2 "$isa" "$dir/bw.c" -o "$dir/bw" -lpthread
"$dir/bw" "$mb"
