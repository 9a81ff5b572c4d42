// plugins/cuda/kernels/plain4.cuh — four consecutive plain weights (f32, f16, bf16) as a float4:
// the loads of the f32-math matmuls (matmul.cu's plain kernel, moe.cu's router). The address
// must be aligned to four values.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace minfer::cuda {

__device__ __forceinline__ float4 load4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
__device__ __forceinline__ float4 load4(const __half *p) {
  const uint2 u = *reinterpret_cast<const uint2 *>(p);
  const float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&u.x)), b = __half22float2(*reinterpret_cast<const __half2 *>(&u.y));
  return {a.x, a.y, b.x, b.y};
}
__device__ __forceinline__ float4 load4(const __nv_bfloat16 *p) {
  const uint2 u = *reinterpret_cast<const uint2 *>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.y));
  return {a.x, a.y, b.x, b.y};
}

}  // namespace minfer::cuda
