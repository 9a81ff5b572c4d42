// plugins/cuda/kernels/grid.cuh — grid sizing shared by the launchers, all in 64-bit.
#pragma once

#include <cstdint>

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
