// plugins/cuda/kernels/grid.cuh — grid sizing shared by the launchers, all in 64-bit.
#pragma once

#include <cstdint>
#include <utility>

#include "launchers.h"

namespace minfer::cuda {

// 256 threads: a multiple of the warp that keeps 8 blocks per SM resident on Hopper
// without register pressure for these simple kernels.
inline constexpr int kBlock = 256;

// ceil(work / threads) blocks, at least 1, at most cfg->max_blocks.
inline unsigned grid_for(minfer_cuda_launch_cfg *cfg, int64_t work, int threads = kBlock) {
  int64_t blocks = (work + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > cfg->max_blocks) blocks = cfg->max_blocks;
  return unsigned(blocks);
}

// launch_kernel: programmatic dependent launch (Hopper and later). With cfg->pdl a kernel is
// launched as the previous one's blocks exit, before that kernel's completion has gone
// through the stream, so the launch latency of the many few-microsecond decode kernels hides
// in the gap. Safe only because every kernel of this plugin starts with wait_for_inputs():
// nothing it reads or writes in global memory is touched before the previous kernel has
// finished and its writes are visible. Measured (H200, 7B/0.5B Q4_0, two alternating rounds
// against pdl: false): +0.4-2% on every decode figure (tg128, batched S_TG at 4-64).
template <class... Params, class... Args>
void launch_kernel_as(minfer_cuda_launch_cfg *cfg, bool cooperative, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                      Args &&...args) {
  cudaLaunchAttribute attr[2] = {};
  unsigned n = 0;
  if (cfg->pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cooperative) {
    attr[n].id = cudaLaunchAttributeCooperative;
    attr[n++].val.cooperative = 1;
  }
  cudaLaunchConfig_t lc = {};
  lc.gridDim = grid, lc.blockDim = block, lc.dynamicSmemBytes = smem, lc.stream = cfg->stream;
  lc.attrs = attr, lc.numAttrs = n;
  cudaLaunchKernelEx(&lc, kernel, std::forward<Args>(args)...);  // its error: launched()
}

template <class... Params, class... Args>
void launch_kernel(minfer_cuda_launch_cfg *cfg, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args &&...args) {
  launch_kernel_as(cfg, false, kernel, grid, block, smem, std::forward<Args>(args)...);
}

// launch_kernel for a kernel whose blocks wait for each other (grid_arrive / grid_wait): a
// cooperative launch, which fails rather than start a grid that cannot be resident all at
// once (a block spinning for one that never gets an SM would hang the device).
template <class... Params, class... Args>
void launch_cooperative(minfer_cuda_launch_cfg *cfg, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args &&...args) {
  launch_kernel_as(cfg, true, kernel, grid, block, smem, std::forward<Args>(args)...);
}

// The first statement of every kernel: wait until the previous kernel in the stream has
// completed (a no-op when launched without PDL). Before it a kernel may read only what no
// kernel of the step writes: weights (written by the host between steps), the step's host
// inputs (positions, page tables) and cache rows of earlier steps. The one-token GEMVs (gemv.cu),
// the MoE router and the decode attention start their loads there, so their memory latency
// overlaps the previous kernel's end.
__device__ __forceinline__ void wait_for_inputs() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next kernel in the stream launch (PDL) once every block of this one has called
// this or exited: its blocks then take SMs as this kernel's blocks leave and issue their
// early loads while this one's last loads are in flight. Called only after wait_for_inputs(),
// so that a kernel launched early still finds every kernel before this one complete, and
// only once a block's last loads are issued: released at the start, the next kernel's blocks
// took SMs during this one's tail and the one-wave matmul grids landed unevenly (2-8% slower,
// batched decode at 4 tokens 8%). Measured on an H100, alternating rounds: released at the
// one-token GEMVs' last rows (with the attention's early loads) tg128 Qwen2-0.5B Q4_0 1,050 ->
// 1,210 t/s, 7B 372 -> 406; then at the decode attention's last keys and the MoE kernels' last
// rows too, tg64 0.5B 1,167 -> 1,234, 7B 401 -> 405; batched decode (4 and 16 sequences) unchanged.
__device__ __forceinline__ void release_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// A grid-wide barrier in two halves, for a cooperative launch: thread 0 of each block, after a
// __syncthreads() that ends the block's writes, arrives (its fence makes them visible first),
// and later waits until `target` arrivals (n barriers of a grid: n * gridDim.x) are counted;
// a __syncthreads() after the wait hands that on to the block. Between the halves a block may
// issue loads that need nothing from the others (the next stage's weights).
__device__ __forceinline__ void grid_arrive(unsigned *count) {
  __threadfence();
  atomicAdd(count, 1u);
}
// The wait is bounded: a block still missing after 10 s of GPU time (a barrier miscounted, or
// a grid not all resident) traps, so the launch fails with an error where it would hang the
// device and every later call (compute-sanitizer's slowest runs take milliseconds here).
__device__ __forceinline__ void grid_wait(const unsigned *count, unsigned target) {
  constexpr uint64_t kLimitNs = 10'000'000'000ull;
  uint64_t start = 0;
  for (unsigned spins = 1;; ++spins) {
    unsigned seen;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(count) : "memory");
    if (seen >= target) return;
    if (spins % 1024 == 0) {  // the clock read only now and then: the loop stays one load a turn
      uint64_t now;
      asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(now));
      if (start == 0) start = now;
      else if (now - start > kLimitNs) __trap();
    }
  }
}

// Call right after a launch: records which kernel it was and returns the launch's error.
inline cudaError_t launched(minfer_cuda_launch_cfg *cfg, const char *kernel, int32_t dtype = -1) {
  cfg->kernel_name = kernel;
  cfg->kernel_dtype = dtype;
  return cudaGetLastError();
}

// Grid-stride loop over [0, n) in 64-bit: correct whether or not the grid was clamped.
#define MINFER_GRID_STRIDE(i, n)                                                       \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);           \
       i += int64_t(gridDim.x) * blockDim.x)

}  // namespace minfer::cuda
