// plugins/cuda/kernels/reduce.cuh — warp and block sums/maxima.
#pragma once

namespace minfer::cuda {

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sums of N values (N a power of two, at most 32) over the warp at once: each halving step
// sends half of a lane's values to its partner and keeps the other half, so N sums cost
// N - 1 + log2(32 / N) shuffles instead of N warp_sums' 5 N. Returns value (lane >> (5 -
// log2 N))'s total; every lane gets one (lanes that share an index hold the same total).
template <int N>
__device__ __forceinline__ float warp_sums(float (&v)[N]) {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "a power of two, at most 32");
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int n = N, o = 16; n > 1; n >>= 1, o >>= 1) {
    const bool upper = lane & o;  // this lane keeps the upper half of the values
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const float send = upper ? v[i] : v[i + n / 2], keep = upper ? v[i + n / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
    }
  }
  float r = v[0];
#pragma unroll
  for (int o = 16 / N; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
  return r;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v, float *scratch /* 32 floats */) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? scratch[lane] : 0.0f;  // every warp sums the partials
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float *scratch /* 32 floats */) {
  v = warp_max(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

}  // namespace minfer::cuda
