// plugins/cuda/kernels/async_copy.cuh — global-to-shared copies that bypass registers
// (cp.async, sm_80+): a kernel issues a stage's copies, works on something else, then waits.
#pragma once

#include <cstdint>

namespace minfer::cuda {

__device__ __forceinline__ unsigned smem_address(const void *p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// 16 bytes, both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_address(smem)), "l"(gmem));
}

// 16 bytes of which only the first `valid` (0 or 16) are read from gmem; the rest zero-filled.
__device__ __forceinline__ void cp_async16_zfill(void *smem, const void *gmem, int valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(smem)), "l"(gmem), "r"(valid));
}

// N (4 or 8) bytes, both addresses N-aligned, of which only the first `valid` (0..N) are read
// from gmem: the rest of the destination is zero-filled (past a row's end, past the tokens).
template <int N>
__device__ __forceinline__ void cp_async_zfill(void *smem, const void *gmem, int valid) {
  static_assert(N == 4 || N == 8, "cp.async.ca copies 4, 8 or 16 bytes");
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_address(smem)), "l"(gmem), "n"(N), "r"(valid));
}

// Closes the copies issued so far into a group; cp_async_wait<N> waits until at most N groups
// are still in flight (a double-buffered pipeline waits for all but the newest).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// The `bytes` bytes at src copied into dst (16-byte aligned) by the warp's lanes, 16-byte
// pieces in turn from the 16-byte boundary at or below src: the run lies at dst + the
// returned lead (src & 15), and the last piece reads nothing past the run (zero-filled). The
// bytes before src read with the first piece must be readable (a weight's row inside its
// allocation). A run takes up to (bytes + 30) / 16 pieces of dst; kMaxPieces > 0: at most
// kMaxPieces a lane (an unrolled loop), 0: any number.
template <int kMaxPieces = 0>
__device__ __forceinline__ int copy_run_async(void *dst, const void *src, int bytes, int lane) {
  const int lead = int(reinterpret_cast<uintptr_t>(src) & 15), end = lead + bytes, n = (end + 15) / 16;
  const uint4 *from = reinterpret_cast<const uint4 *>(static_cast<const uint8_t *>(src) - lead);
  uint4 *to = static_cast<uint4 *>(dst);
  const auto piece = [&](int i) { cp_async16_zfill(to + i, from + i, end - 16 * i < 16 ? end - 16 * i : 16); };
  if constexpr (kMaxPieces > 0) {
#pragma unroll
    for (int u = 0; u < kMaxPieces; ++u)
      if (lane + 32 * u < n) piece(lane + 32 * u);
  } else {
    for (int i = lane; i < n; i += 32) piece(i);
  }
  return lead;
}

// Shared memory for a run of `bytes` bytes at any lead (copy_run_async).
__host__ __device__ constexpr int run_slot_bytes(int64_t bytes) { return int((bytes + 30) / 16 * 16); }

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\n" ::);
  asm volatile("cp.async.wait_group 0;\n" ::);
}

}  // namespace minfer::cuda
