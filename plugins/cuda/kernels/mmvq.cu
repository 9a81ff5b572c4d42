// plugins/cuda/kernels/mmvq.cu — matmul with 8-bit activations: y[t] = W x[t] for Q4_0/Q8_0
// weights, in integer dot products (dp4a).
//
// The activations are quantized once per call to 32-value blocks (int8 + scale, and the
// scaled sum Q4_0's -8 offset needs). One warp per output row: each lane takes whole weight
// blocks, loads their bytes as 32-bit words and dots four bytes per dp4a; a tile of up to
// kTokens tokens reuses each loaded weight block, so prefill reads the weights once per tile.
#include <cuda_fp16.h>

#include "grid.cuh"
#include "minfer/blocks.h"
#include "minfer/dtype.h"
#include "q8_act.cuh"
#include "reduce.cuh"


namespace minfer::cuda {
namespace {

constexpr int kWarps = 8;   // rows per 256-thread block
constexpr int kTokens = 8;  // tokens per weight read

__global__ void quantize_q8_act_kernel(const float *x, minfer_cuda_q8_act *q, int64_t n_blocks) {
  // One warp per block of 32 values: lane i holds value i.
  const int lane = threadIdx.x & 31;
  for (int64_t b = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; b < n_blocks; b += (int64_t(gridDim.x) * blockDim.x) >> 5) {
    const float v = x[b * 32 + lane];
    const float amax = warp_max(fabsf(v));
    const float d = amax / 127.0f;
    const int qi = d > 0 ? __float2int_rn(v / d) : 0;
    const int sum = int(warp_sum(float(qi)));
    reinterpret_cast<int8_t *>(q[b].qs)[lane] = int8_t(qi);
    if (lane == 0) {
      q[b].d = d;
      q[b].s = d * float(sum);
    }
  }
}

// Weight words: byte-aligned blocks (18 or 34 bytes), so read 16-bit halves and join them.
__device__ __forceinline__ int load_word(const uint8_t *p) {
  const uint16_t *h = reinterpret_cast<const uint16_t *>(p);
  return int(uint32_t(h[0]) | uint32_t(h[1]) << 16);
}

template <class Block>
__device__ __forceinline__ float block_dot(const Block &w, const minfer_cuda_q8_act &a, const int (&wq)[8]);

// Q4_0: low nibbles are values 0..15, high nibbles 16..31; value = d * (q - 8).
template <>
__device__ __forceinline__ float block_dot(const minfer_block_q4_0 &w, const minfer_cuda_q8_act &a, const int (&wq)[8]) {
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    sum = __dp4a(wq[i] & 0x0f0f0f0f, a.qs[i], sum);
    sum = __dp4a((wq[i] >> 4) & 0x0f0f0f0f, a.qs[i + 4], sum);
  }
  return __half2float(__ushort_as_half(w.d)) * (a.d * float(sum) - 8.0f * a.s);
}

template <>
__device__ __forceinline__ float block_dot(const minfer_block_q8_0 &w, const minfer_cuda_q8_act &a, const int (&wq)[8]) {
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) sum = __dp4a(wq[i], a.qs[i], sum);
  return __half2float(__ushort_as_half(w.d)) * a.d * float(sum);
}

template <class Block> constexpr int kWords = 0;
template <> constexpr int kWords<minfer_block_q4_0> = 4;
template <> constexpr int kWords<minfer_block_q8_0> = 8;

template <class Block>
__global__ void mmvq_kernel(const Block *w, const minfer_cuda_q8_act *x, float *y, int64_t k, int64_t m, int64_t tokens) {
  const int lane = threadIdx.x & 31;
  const int64_t nb = k / 32;
  for (int64_t o = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5); o < m; o += int64_t(gridDim.x) * kWarps) {
    const Block *row = w + o * nb;
    for (int64_t t0 = 0; t0 < tokens; t0 += kTokens) {
      const int nt = int(tokens - t0 < kTokens ? tokens - t0 : kTokens);
      float acc[kTokens];
#pragma unroll
      for (int j = 0; j < kTokens; ++j) acc[j] = 0;
      for (int64_t b = lane; b < nb; b += 32) {
        int wq[8];
        const uint8_t *qs = reinterpret_cast<const uint8_t *>(row[b].qs);
#pragma unroll
        for (int i = 0; i < kWords<Block>; ++i) wq[i] = load_word(qs + 4 * i);
#pragma unroll
        for (int j = 0; j < kTokens; ++j)
          if (j < nt) acc[j] += block_dot(row[b], x[(t0 + j) * nb + b], wq);
      }
#pragma unroll
      for (int j = 0; j < kTokens; ++j) {
        if (j >= nt) break;
        const float v = warp_sum(acc[j]);
        if (lane == 0) y[(t0 + j) * m + o] = v;
      }
    }
  }
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" size_t minfer_cuda_q8_act_bytes(int64_t k, int64_t tokens) {
  return size_t(k / 32) * size_t(tokens) * sizeof(minfer_cuda_q8_act);
}

extern "C" cudaError_t minfer_cuda_quantize_q8_act(minfer_cuda_launch_cfg *cfg, const float *x, void *q, int64_t n) {
  const int64_t blocks = n / 32;
  quantize_q8_act_kernel<<<grid_for(cfg, blocks * 32), kBlock, 0, cfg->stream>>>(x, static_cast<minfer_cuda_q8_act *>(q), blocks);
  return launched(cfg, "quantize_q8_act_kernel");
}

extern "C" int minfer_cuda_mmvq_supported(int32_t dtype) {
  return dtype == MINFER_DTYPE_Q4_0 || dtype == MINFER_DTYPE_Q8_0;
}

extern "C" cudaError_t minfer_cuda_mmvq(minfer_cuda_launch_cfg *cfg, int32_t dtype, const void *w, const void *xq, float *y,
                                        int64_t k, int64_t m, int64_t tokens) {
  const int64_t blocks = (m + kWarps - 1) / kWarps;
  const unsigned grid = unsigned(blocks < cfg->max_blocks ? blocks : cfg->max_blocks);
  const auto *xa = static_cast<const minfer_cuda_q8_act *>(xq);
  if (dtype == MINFER_DTYPE_Q4_0)
    mmvq_kernel<minfer_block_q4_0><<<grid, kWarps * 32, 0, cfg->stream>>>(static_cast<const minfer_block_q4_0 *>(w), xa, y, k, m, tokens);
  else if (dtype == MINFER_DTYPE_Q8_0)
    mmvq_kernel<minfer_block_q8_0><<<grid, kWarps * 32, 0, cfg->stream>>>(static_cast<const minfer_block_q8_0 *>(w), xa, y, k, m, tokens);
  else
    return cudaErrorNotSupported;
  return launched(cfg, "mmvq_kernel", dtype);
}
