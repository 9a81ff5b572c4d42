// plugins/cuda/kernels/norm.cu — RMS norm: y = x / sqrt(mean(x^2) + eps) * w.
#include <cstdint>

#include "grid.cuh"
#include "reduce.cuh"
#include "rms_row.cuh"

namespace minfer::cuda {
namespace {

// One block per row. Rows that fit (rms_row.cuh: every model's hidden size) stay in registers
// between the sum and the scaling, and every load of the row and of the weights is issued
// before the first one is needed: one memory latency, not one per loop step. Longer or
// unaligned rows take the plain two-pass loop.
__global__ void rms_norm_f32_kernel(const float *x, const float *w, float *y, int64_t rows, int64_t d, float eps) {
  wait_for_inputs();
  __shared__ float scratch[32];
  const bool cached = rms_row_fits(d, int(blockDim.x), x, w, y);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * d;
    if (cached) {
      RmsRow row;
      rms_row_load(xr, w, d, eps, row, scratch);
      float4 *y4 = reinterpret_cast<float4 *>(y + r * d);
#pragma unroll
      for (int u = 0; u < kRmsCached; ++u) {
        const int64_t i = threadIdx.x + int64_t(u) * blockDim.x;
        if (i < d / 4) y4[i] = rms_row_value(row, u);
      }
      continue;
    }
    float ss = 0;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, scratch);
    const float scale = rsqrtf(ss / float(d) + eps);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) y[r * d + i] = xr[i] * scale * w[i];
  }
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" cudaError_t minfer_cuda_rms_norm_f32(minfer_cuda_launch_cfg *cfg, const float *x, const float *w, float *y,
                                                int64_t rows, int64_t d, float eps) {
  const int64_t blocks = rows < cfg->max_blocks ? rows : cfg->max_blocks;
  launch_kernel(cfg, rms_norm_f32_kernel, unsigned(blocks > 0 ? blocks : 1), kBlock, 0, x, w, y, rows, d, eps);
  return launched(cfg, "rms_norm_f32_kernel");
}
