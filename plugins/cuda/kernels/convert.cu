// plugins/cuda/kernels/convert.cu — f32 -> f16, eight values per thread.
#include <cuda_fp16.h>

#include "grid.cuh"

namespace minfer::cuda {
namespace {

// Eight values per thread: two 16-byte loads and one 16-byte store, so each warp moves whole
// 512-byte lines; a memory-bound copy needs wide accesses more than it needs threads.
constexpr int kPerThread = 8;

// kSaturate: values past f16's range become +-65504, not infinities, for the f16 matmuls
// (mmq_f16.cu, few_token_q6k.cu, the f16 GEMM), where an infinity times a zero weight would be
// a NaN in every output of its token; NaN stays NaN.
template <bool kSaturate>
__device__ __forceinline__ float f16_range(float v) {
  return kSaturate && fabsf(v) > 65504.0f ? copysignf(65504.0f, v) : v;
}

template <bool kSaturate>
__global__ void convert_f32_f16_vec8_kernel(const float4 *x, uint4 *y, int64_t n_chunks) {
  wait_for_inputs();
  MINFER_GRID_STRIDE(i, n_chunks) {
    const float4 a = x[2 * i], b = x[2 * i + 1];
    const __half2 h0 = __floats2half2_rn(f16_range<kSaturate>(a.x), f16_range<kSaturate>(a.y)), h1 = __floats2half2_rn(f16_range<kSaturate>(a.z), f16_range<kSaturate>(a.w));
    const __half2 h2 = __floats2half2_rn(f16_range<kSaturate>(b.x), f16_range<kSaturate>(b.y)), h3 = __floats2half2_rn(f16_range<kSaturate>(b.z), f16_range<kSaturate>(b.w));
    uint4 out;
    out.x = *reinterpret_cast<const uint32_t *>(&h0);
    out.y = *reinterpret_cast<const uint32_t *>(&h1);
    out.z = *reinterpret_cast<const uint32_t *>(&h2);
    out.w = *reinterpret_cast<const uint32_t *>(&h3);
    y[i] = out;
  }
}

// Scalar form: the tail after the last whole chunk, or unaligned tensors.
template <bool kSaturate>
__global__ void convert_f32_f16_kernel(const float *x, __half *y, int64_t n) {
  wait_for_inputs();
  MINFER_GRID_STRIDE(i, n) y[i] = __float2half_rn(f16_range<kSaturate>(x[i]));
}

// A run of 16 values in mma_f16.cuh's k order: the pairs (0 1) (4 5) (8 9) (12 13) in the first
// 16 bytes, (2 3) (6 7) (10 11) (14 15) in the second, so that wgmma, which reads a run's
// positions in order, meets the values the A fragment's lanes put there.
__global__ void convert_f32_f16_mma_order_kernel(const float4 *x, uint4 *y, int64_t runs) {
  wait_for_inputs();
  MINFER_GRID_STRIDE(i, runs) {
    float4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = x[4 * i + j];
    uint4 lo, hi;
    uint32_t *l = &lo.x, *h = &hi.x;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const __half2 a = __floats2half2_rn(f16_range<true>(v[j].x), f16_range<true>(v[j].y));
      const __half2 b = __floats2half2_rn(f16_range<true>(v[j].z), f16_range<true>(v[j].w));
      l[j] = *reinterpret_cast<const uint32_t *>(&a), h[j] = *reinterpret_cast<const uint32_t *>(&b);
    }
    y[2 * i] = lo, y[2 * i + 1] = hi;
  }
}

// Scalar form for tensors off 16 bytes: output position p of a run takes value 4 (p / 2 % 4) +
// p % 2, plus 2 in the second half.
__global__ void convert_f32_f16_mma_order_scalar_kernel(const float *x, __half *y, int64_t n) {
  wait_for_inputs();
  MINFER_GRID_STRIDE(i, n) {
    const int p = int(i & 15);
    y[i] = __float2half_rn(f16_range<true>(x[(i & ~int64_t(15)) + 4 * ((p >> 1) & 3) + (p & 1) + (p >> 3) * 2]));
  }
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" cudaError_t minfer_cuda_convert_f32_f16_mma_order(minfer_cuda_launch_cfg *cfg, const float *x, uint16_t *y, int64_t n) {
  if (n % 16) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(x) % 16 || reinterpret_cast<uintptr_t>(y) % 16) {
    launch_kernel(cfg, convert_f32_f16_mma_order_scalar_kernel, grid_for(cfg, n), kBlock, 0, x, reinterpret_cast<__half *>(y), n);
    return launched(cfg, "convert_f32_f16_mma_order_scalar_kernel");
  }
  launch_kernel(cfg, convert_f32_f16_mma_order_kernel, grid_for(cfg, n / 16), kBlock, 0, reinterpret_cast<const float4 *>(x),
                reinterpret_cast<uint4 *>(y), n / 16);
  return launched(cfg, "convert_f32_f16_mma_order_kernel");
}

namespace {
template <bool kSaturate>
cudaError_t convert(minfer_cuda_launch_cfg *cfg, const float *x, uint16_t *y, int64_t n) {
  const bool aligned = (reinterpret_cast<uintptr_t>(x) % 16 == 0) &&
                       (reinterpret_cast<uintptr_t>(y) % 16 == 0);
  int64_t done = 0;
  if (aligned && n >= kPerThread) {
    const int64_t chunks = n / kPerThread;
    launch_kernel(cfg, convert_f32_f16_vec8_kernel<kSaturate>, grid_for(cfg, chunks), kBlock, 0,
        reinterpret_cast<const float4 *>(x), reinterpret_cast<uint4 *>(y), chunks);
    const cudaError_t err = launched(cfg, "convert_f32_f16_vec8_kernel");
    if (err != cudaSuccess) return err;
    done = chunks * kPerThread;
  }
  if (done < n) {
    launch_kernel(cfg, convert_f32_f16_kernel<kSaturate>, grid_for(cfg, n - done), kBlock, 0,
        x + done, reinterpret_cast<__half *>(y) + done, n - done);
    return launched(cfg, "convert_f32_f16_kernel");
  }
  return cudaSuccess;
}
}  // namespace

extern "C" cudaError_t minfer_cuda_convert_f32_f16(minfer_cuda_launch_cfg *cfg, const float *x, uint16_t *y, int64_t n, int32_t saturate) {
  return saturate ? convert<true>(cfg, x, y, n) : convert<false>(cfg, x, y, n);
}
