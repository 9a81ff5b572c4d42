// plugins/cuda/kernels/rms_row.cuh — one row's RMS norm held in a block's registers: norm.cu's
// kernel and the MoE router (moe.cu), which normalizes the token itself. Both sum x^2 in this
// one order, so the router's normalized row has the norm kernel's bits.
#pragma once

#include <cstdint>

#include "reduce.cuh"

namespace minfer::cuda {

// Rows of up to kRmsCached float4 per thread (7168 values at 256 threads: every model's hidden
// size); thread t holds float4s t, t + blockDim.x, ...
constexpr int kRmsCached = 7;

struct RmsRow {
  float4 x[kRmsCached], w[kRmsCached];
  float scale;
};

// Whether a row of d values at these addresses fits: d % 4 == 0, at most kRmsCached float4 a
// thread, every address 16-byte aligned.
__host__ __device__ inline bool rms_row_fits(int64_t d, int threads, const void *x, const void *w, const void *y) {
  return d % 4 == 0 && d / 4 <= int64_t(kRmsCached) * threads &&
         (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(y)) % 16 == 0;
}

// Issues every load of the row and the norm weights before the first is used (one memory
// latency), then the block's sum of squares: r.scale = 1 / sqrt(mean(x^2) + eps). Every thread
// of the block calls it. kThreads > 0: the row laid out over the first kThreads threads as a
// block of that many would hold it (the others hold nothing and add zeros): the same sums.
// kFromL2: x read past L1 (__ldcg), for a row other blocks of the same launch wrote.
template <int kThreads = 0, bool kFromL2 = false>
__device__ __forceinline__ void rms_row_load(const float *xr, const float *w, int64_t d, float eps, RmsRow &r, float *scratch /* 32 */) {
  const float4 *x4 = reinterpret_cast<const float4 *>(xr), *w4 = reinterpret_cast<const float4 *>(w);
  const int64_t stride = kThreads > 0 ? kThreads : blockDim.x;
  const bool holds = kThreads == 0 || int(threadIdx.x) < kThreads;
  float ss = 0;
#pragma unroll
  for (int u = 0; u < kRmsCached; ++u) {
    const int64_t i = threadIdx.x + int64_t(u) * stride;
    if (holds && i < d / 4) r.x[u] = kFromL2 ? __ldcg(x4 + i) : x4[i], r.w[u] = w4[i];
  }
#pragma unroll
  for (int u = 0; u < kRmsCached; ++u)
    if (holds && threadIdx.x + int64_t(u) * stride < d / 4)
      ss += r.x[u].x * r.x[u].x + r.x[u].y * r.x[u].y + r.x[u].z * r.x[u].z + r.x[u].w * r.x[u].w;
  ss = block_sum(ss, scratch);
  r.scale = rsqrtf(ss / float(d) + eps);
}

// The normalized values of the thread's float4 u: x * scale * w.
__device__ __forceinline__ float4 rms_row_value(const RmsRow &r, int u) {
  return make_float4(r.x[u].x * r.scale * r.w[u].x, r.x[u].y * r.scale * r.w[u].y, r.x[u].z * r.scale * r.w[u].z,
                     r.x[u].w * r.scale * r.w[u].w);
}

}  // namespace minfer::cuda
