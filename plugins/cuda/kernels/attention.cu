// plugins/cuda/kernels/attention.cu — paged KV-cache write and causal grouped-query attention.
//
// The plain kernel, for head dims the fused ones are not built for: one block per (token,
// head); scores for every position of the token's sequence sit in shared memory, then
// softmax, then each thread sums one output dim over the positions, each read through the
// sequence's page table. flash_attention.cu holds the fast kernels.
#include <cuda_fp16.h>

#include "grid.cuh"
#include "kv_pages.cuh"
#include "minfer/dtype.h"
#include "reduce.cuh"

namespace minfer::cuda {
namespace {

__device__ __forceinline__ float ld(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld(const __half *p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void st(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(__half *p, int64_t i, float v) { p[i] = __float2half_rn(v); }

template <class T>
__global__ void kv_write_kernel(const float *k, const float *v, T *kc, T *vc, int64_t tokens, int64_t kvd, minfer_cuda_kv_pages kv) {
  wait_for_inputs();
  MINFER_GRID_STRIDE(i, tokens * kvd) {
    const int64_t t = i / kvd, at = kv_row(kv, kv.slots[t], kv.positions[t]) * kvd + i % kvd;
    st(kc, at, k[i]);
    st(vc, at, v[i]);
  }
}

template <class T>
__global__ void attention_kernel(const float *q, const T *kc, const T *vc, float *out, int64_t tokens, int n_head,
                                 int n_kv, int hd, minfer_cuda_kv_pages kv, minfer_cuda_attn_scores sc) {
  wait_for_inputs();
  extern __shared__ float smem[];
  __shared__ float scratch[32];
  float *qs = smem, *score = smem + hd;
  const int64_t kvd = int64_t(n_kv) * hd;
  const int group = n_head / n_kv;
  for (int64_t w = blockIdx.x; w < tokens * n_head; w += gridDim.x) {
    const int64_t t = w / n_head;
    const int h = int(w % n_head), kvh = h / group;
    const int64_t last = kv.positions[t], first = first_key(sc, last);
    const int32_t slot = kv.slots[t];
    for (int d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = q[(t * n_head + h) * hd + d];
    __syncthreads();
    float mx = -INFINITY;
    for (int64_t j = first + threadIdx.x; j <= last; j += blockDim.x) {
      const int64_t base = kv_row(kv, slot, j) * kvd + int64_t(kvh) * hd;
      float part[4] = {0, 0, 0, 0};  // independent sums: a serial one over 256 dims loses digits
      int d = 0;
      for (; d + 4 <= hd; d += 4)
        for (int e = 0; e < 4; ++e) part[e] += qs[d + e] * ld(kc, base + d + e);
      for (; d < hd; ++d) part[0] += qs[d] * ld(kc, base + d);
      const float s = cap_score(sc, ((part[0] + part[1]) + (part[2] + part[3])) * sc.scale);
      score[j] = s;
      mx = fmaxf(mx, s);
    }
    mx = block_max(mx, scratch);
    float sum = 0;
    for (int64_t j = first + threadIdx.x; j <= last; j += blockDim.x) sum += score[j] = expf(score[j] - mx);
    sum = block_sum(sum, scratch);
    __syncthreads();  // every score is final before any thread reads them all
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
      float acc = 0;
      for (int64_t j = first; j <= last; ++j) acc += score[j] * ld(vc, kv_row(kv, slot, j) * kvd + int64_t(kvh) * hd + d);
      out[(t * n_head + h) * hd + d] = acc / sum;
    }
    __syncthreads();  // qs and score are reused by the next (token, head)
  }
}

constexpr int kAttnThreads = 128;

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" cudaError_t minfer_cuda_kv_write(minfer_cuda_launch_cfg *cfg, const float *k, const float *v, void *kc, void *vc,
                                            int32_t dtype, int64_t tokens, int64_t kvd, minfer_cuda_kv_pages kv) {
  if (dtype == MINFER_DTYPE_F16)
    launch_kernel(cfg, kv_write_kernel<__half>, grid_for(cfg, tokens * kvd), kBlock, 0,
        k, v, static_cast<__half *>(kc), static_cast<__half *>(vc), tokens, kvd, kv);
  else if (dtype == MINFER_DTYPE_F32)
    launch_kernel(cfg, kv_write_kernel<float>, grid_for(cfg, tokens * kvd), kBlock, 0,
        k, v, static_cast<float *>(kc), static_cast<float *>(vc), tokens, kvd, kv);
  else
    return cudaErrorNotSupported;
  return launched(cfg, "kv_write_kernel", dtype);
}

extern "C" int64_t minfer_cuda_attention_max_positions(int device) {
  int optin = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) return 0;
  return (int64_t(optin) - 1024 - 256 * 4) / 4;  // the static scratch, q (head_dim <= 256), the scores
}

extern "C" cudaError_t minfer_cuda_attention(minfer_cuda_launch_cfg *cfg, const float *q, const void *kc, const void *vc,
                                             int32_t dtype, float *out, int64_t tokens, int32_t n_head, int32_t n_kv,
                                             int32_t hd, minfer_cuda_kv_pages kv, int64_t max_positions, minfer_cuda_attn_scores scores) {
  // Shared memory for every position the cache holds, not just this step's: a graph captured
  // once must fit every later step.
  const size_t smem = size_t(hd + max_positions) * sizeof(float);
  const int64_t work = tokens * n_head;
  const unsigned grid = unsigned(work < cfg->max_blocks ? work : cfg->max_blocks);
  if (dtype == MINFER_DTYPE_F16) {
    if (smem > 48 * 1024) cudaFuncSetAttribute(attention_kernel<__half>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    launch_kernel(cfg, attention_kernel<__half>, grid, kAttnThreads, smem, q, static_cast<const __half *>(kc),
                                                                         static_cast<const __half *>(vc), out, tokens,
                                                                         n_head, n_kv, hd, kv, scores);
  } else if (dtype == MINFER_DTYPE_F32) {
    if (smem > 48 * 1024) cudaFuncSetAttribute(attention_kernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    launch_kernel(cfg, attention_kernel<float>, grid, kAttnThreads, smem, q, static_cast<const float *>(kc),
                                                                        static_cast<const float *>(vc), out, tokens, n_head,
                                                                        n_kv, hd, kv, scores);
  } else {
    return cudaErrorNotSupported;
  }
  return launched(cfg, "attention_kernel", dtype);
}
