// plugins/cuda/kernels/norm.cu — RMS norm: y = x / sqrt(mean(x^2) + eps) * w.
#include <cstdint>

#include "grid.cuh"
#include "reduce.cuh"

namespace minfer::cuda {
namespace {

// One block per row. Rows of up to kCached float4 per thread (7168 values at 256 threads: every
// model's hidden size) stay in registers between the sum and the scaling, and every load of
// the row and of the weights is issued before the first one is needed: one memory latency,
// not one per loop step. Longer or unaligned rows take the plain two-pass loop.
constexpr int kCached = 7;

__global__ void rms_norm_f32_kernel(const float *x, const float *w, float *y, int64_t rows, int64_t d, float eps) {
  wait_for_inputs();
  __shared__ float scratch[32];
  const bool cached = d % 4 == 0 && d / 4 <= int64_t(kCached) * blockDim.x &&
                      (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(y)) % 16 == 0;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * d;
    if (cached) {
      const float4 *x4 = reinterpret_cast<const float4 *>(xr), *w4 = reinterpret_cast<const float4 *>(w);
      float4 xv[kCached], wv[kCached];
      float ss = 0;
#pragma unroll
      for (int u = 0; u < kCached; ++u) {
        const int64_t i = threadIdx.x + int64_t(u) * blockDim.x;
        if (i < d / 4) xv[u] = x4[i], wv[u] = w4[i];
      }
#pragma unroll
      for (int u = 0; u < kCached; ++u)
        if (threadIdx.x + int64_t(u) * blockDim.x < d / 4) ss += xv[u].x * xv[u].x + xv[u].y * xv[u].y + xv[u].z * xv[u].z + xv[u].w * xv[u].w;
      ss = block_sum(ss, scratch);
      const float scale = rsqrtf(ss / float(d) + eps);
      float4 *y4 = reinterpret_cast<float4 *>(y + r * d);
#pragma unroll
      for (int u = 0; u < kCached; ++u) {
        const int64_t i = threadIdx.x + int64_t(u) * blockDim.x;
        if (i < d / 4)
          y4[i] = make_float4(xv[u].x * scale * wv[u].x, xv[u].y * scale * wv[u].y, xv[u].z * scale * wv[u].z, xv[u].w * scale * wv[u].w);
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
