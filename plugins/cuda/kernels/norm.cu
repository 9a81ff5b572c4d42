// plugins/cuda/kernels/norm.cu — RMS norm: y = x / sqrt(mean(x^2) + eps) * w.
#include "grid.cuh"
#include "reduce.cuh"

namespace minfer::cuda {
namespace {

// One block per row (rows are a few thousand values: one pass for the sum, one to scale).
__global__ void rms_norm_f32_kernel(const float *x, const float *w, float *y, int64_t rows, int64_t d, float eps) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * d;
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
  rms_norm_f32_kernel<<<unsigned(blocks > 0 ? blocks : 1), kBlock, 0, cfg->stream>>>(x, w, y, rows, d, eps);
  return launched(cfg, "rms_norm_f32_kernel");
}
