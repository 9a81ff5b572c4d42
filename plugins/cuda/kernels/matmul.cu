// plugins/cuda/kernels/matmul.cu — y[t] = W x[t] for weights of every type.
//
// First version, for correctness across all weight types: one warp per output row; lanes
// take the row's blocks in turn, decode each with the SDK decoder and dot it with the
// token's activations; a warp sum gives the value. The quantized GEMV (decode) and int8 MMQ
// GEMM (prefill) paths replace it for speed.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "grid.cuh"
#include "moe_route.cuh"
#include "plain4.cuh"
#include "minfer/decode.hpp"
#include "reduce.cuh"

namespace minfer::cuda {
namespace {

constexpr int kWarps = 8;  // rows per 256-thread block

// Plain weights as "blocks" of one value, so one kernel serves every type.
struct F32 { float v; };
struct F16 { __half v; };
struct BF16 { __nv_bfloat16 v; };
template <class Put> __device__ __forceinline__ void decode_block(const F32 &b, Put &&put) { put(0, b.v); }
template <class Put> __device__ __forceinline__ void decode_block(const F16 &b, Put &&put) { put(0, __half2float(b.v)); }
template <class Put> __device__ __forceinline__ void decode_block(const BF16 &b, Put &&put) { put(0, __bfloat162float(b.v)); }
template <class Block, class Put>
__device__ __forceinline__ void decode_any(const Block &b, Put &&put) {
  using minfer::sdk::decode_block;
  decode_block(b, put);
}

template <class Block>
__global__ void matmul_kernel(const Block *w, const float *x, float *y, int64_t k, int64_t m, int64_t tokens, int per) {
  wait_for_inputs();
  const int lane = threadIdx.x & 31;
  const int64_t blocks_per_row = k / per;
  for (int64_t o = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5); o < m; o += int64_t(gridDim.x) * kWarps) {
    const Block *row = w + o * blocks_per_row;
    for (int64_t t = 0; t < tokens; ++t) {
      const float *xt = x + t * k;
      float acc = 0;
      for (int64_t b = lane; b < blocks_per_row; b += 32) {
        const float *xb = xt + b * per;
        decode_any(row[b], [&](int i, float v) { acc += v * xb[i]; });
      }
      acc = warp_sum(acc);
      if (lane == 0) y[t * m + o] = acc;
    }
  }
}

// Plain weights (f32, f16, bf16) with k % 4 == 0 and aligned rows: a row is split over
// kSplit warps of the block (each a quarter of it, four values a lane a load, kUnroll loads
// in flight) and kTokens tokens ride along each pass, so the small matrices this path gets
// (an MoE router: 2048 x 128 f32) fill the GPU instead of 16 blocks of one-warp rows.
constexpr int kSplit = 4, kPlainRows = 2, kUnroll = 4, kTokens = 4;

template <class T>
__global__ void __launch_bounds__(kSplit * kPlainRows * 32) plain_matmul_kernel(const T *w, const float *x, float *y, int64_t k, int64_t m,
                                                                                 int64_t tokens) {
  wait_for_inputs();
  __shared__ float part[kPlainRows][kSplit][kTokens];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, rw = warp / kSplit, sw = warp % kSplit;
  const int64_t quads = k / 4, per = (quads + kSplit - 1) / kSplit, q0 = sw * per, q1 = q0 + per < quads ? q0 + per : quads;
  for (int64_t o0 = int64_t(blockIdx.x) * kPlainRows; o0 < m; o0 += int64_t(gridDim.x) * kPlainRows) {
    const int64_t o = o0 + rw;
    for (int64_t t0 = 0; t0 < tokens; t0 += kTokens) {
      const int nt = int(tokens - t0 < kTokens ? tokens - t0 : kTokens);
      float acc[kTokens] = {};
      if (o < m) {
        const T *row = w + o * k;
        for (int64_t q = q0 + lane; q < q1; q += 32 * kUnroll) {
          float4 wv[kUnroll];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u)
            if (q + 32 * u < q1) wv[u] = load4(row + 4 * (q + 32 * u));
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            if (q + 32 * u >= q1) break;
#pragma unroll
            for (int j = 0; j < kTokens; ++j) {
              if (j >= nt) break;
              const float4 xv = load4(x + (t0 + j) * k + 4 * (q + 32 * u));
              acc[j] += wv[u].x * xv.x + wv[u].y * xv.y + wv[u].z * xv.z + wv[u].w * xv.w;
            }
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kTokens; ++j) acc[j] = warp_sum(acc[j]);
      __syncthreads();  // the previous pass has read part
      if (lane == 0)
#pragma unroll
        for (int j = 0; j < kTokens; ++j) part[rw][sw][j] = acc[j];
      __syncthreads();
      if (sw == 0 && lane < nt && o < m) {
        float v = 0;
#pragma unroll
        for (int s = 0; s < kSplit; ++s) v += part[rw][s][lane];
        y[(t0 + lane) * m + o] = v;
      }
    }
  }
}

template <class T>
cudaError_t launch_plain(minfer_cuda_launch_cfg *cfg, const void *w, const float *x, float *y, int64_t k, int64_t m, int64_t tokens,
                         int32_t dtype) {
  const int64_t blocks = (m + kPlainRows - 1) / kPlainRows;
  launch_kernel(cfg, plain_matmul_kernel<T>, unsigned(blocks < cfg->max_blocks ? blocks : cfg->max_blocks), kSplit * kPlainRows * 32, 0,
                static_cast<const T *>(w), x, y, k, m, tokens);
  return launched(cfg, "plain_matmul_kernel", dtype);
}

// Whether the plain kernel's four-value loads are aligned: rows of k % 4 == 0 values from
// 4-value-aligned bases.
inline bool plain_aligned(const void *w, const float *x, int64_t k, size_t value_bytes) {
  return k % 4 == 0 && reinterpret_cast<uintptr_t>(w) % (4 * value_bytes) == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

template <class Block>
cudaError_t launch(minfer_cuda_launch_cfg *cfg, const void *w, const float *x, float *y, int64_t k, int64_t m,
                   int64_t tokens, int per, int32_t dtype) {
  const int64_t blocks = (m + kWarps - 1) / kWarps;
  launch_kernel(cfg, matmul_kernel<Block>, unsigned(blocks < cfg->max_blocks ? blocks : cfg->max_blocks), kWarps * 32, 0,
      static_cast<const Block *>(w), x, y, k, m, tokens, per);
  return launched(cfg, "matmul_kernel", dtype);
}

// MATMUL_ID for every weight type: a warp per (active expert, row), the expert's pairs in
// turn (the row's blocks decoded again per pair; the int8 types take moe.cu's kernel).
template <class Block>
__global__ void matmul_id_kernel(const Block *w, const float *x, float *y, int64_t k, int64_t m, int64_t choices, int x_per_pair, int per,
                                 MoeRoute route) {
  wait_for_inputs();
  const int lane = threadIdx.x & 31;
  const int64_t blocks_per_row = k / per;
  for (int64_t item = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5); item < route.max_slots * m; item += int64_t(gridDim.x) * kWarps) {
    const int64_t slot = item / m, o = item - slot * m;
    if (slot >= route.n_active()) break;
    const int32_t *sl = route.slot(slot);
    const Block *row = w + (int64_t(sl[0]) * m + o) * blocks_per_row;
    for (int32_t p = sl[1]; p < sl[2]; ++p) {
      const int64_t pair = route.pairs()[p];
      const float *xt = x + (x_per_pair ? pair : pair / choices) * k;
      float acc = 0;
      for (int64_t b = lane; b < blocks_per_row; b += 32) {
        const float *xb = xt + b * per;
        decode_any(row[b], [&](int i, float v) { acc += v * xb[i]; });
      }
      acc = warp_sum(acc);
      if (lane == 0) y[pair * m + o] = acc;
    }
  }
}

template <class Block>
cudaError_t launch_id(minfer_cuda_launch_cfg *cfg, const void *w, const float *x, float *y, int64_t k, int64_t m, int64_t choices,
                      int x_per_pair, int per, MoeRoute route, int32_t dtype) {
  const int64_t blocks = (route.max_slots * m + kWarps - 1) / kWarps;
  launch_kernel(cfg, matmul_id_kernel<Block>, unsigned(blocks < cfg->max_blocks ? blocks : cfg->max_blocks), kWarps * 32, 0,
      static_cast<const Block *>(w), x, y, k, m, choices, x_per_pair, per, route);
  return launched(cfg, "matmul_id_kernel", dtype);
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" cudaError_t minfer_cuda_matmul(minfer_cuda_launch_cfg *cfg, int32_t dtype, const void *w, const float *x, float *y,
                                          int64_t k, int64_t m, int64_t tokens) {
  if (dtype == MINFER_DTYPE_F32)
    return plain_aligned(w, x, k, 4) ? launch_plain<float>(cfg, w, x, y, k, m, tokens, dtype) : launch<F32>(cfg, w, x, y, k, m, tokens, 1, dtype);
  if (dtype == MINFER_DTYPE_F16)
    return plain_aligned(w, x, k, 2) ? launch_plain<__half>(cfg, w, x, y, k, m, tokens, dtype) : launch<F16>(cfg, w, x, y, k, m, tokens, 1, dtype);
  if (dtype == MINFER_DTYPE_BF16)
    return plain_aligned(w, x, k, 2) ? launch_plain<__nv_bfloat16>(cfg, w, x, y, k, m, tokens, dtype)
                                     : launch<BF16>(cfg, w, x, y, k, m, tokens, 1, dtype);
  cudaError_t err = cudaErrorNotSupported;
  const int per = minfer_dtype_info(dtype).block_values;
  minfer::sdk::visit_block_dtype(dtype, [&](auto tag) {
    using Block = typename decltype(tag)::type;
    err = launch<Block>(cfg, w, x, y, k, m, tokens, per, dtype);
  });
  return err;
}

extern "C" cudaError_t minfer_cuda_matmul_id(minfer_cuda_launch_cfg *cfg, int32_t dtype, const void *w, const float *x, float *y, int64_t k,
                                             int64_t m, int64_t n_expert, int64_t n_pairs, int64_t choices, int32_t x_per_pair,
                                             const void *route) {
  if (n_pairs < 1) return cudaSuccess;
  const MoeRoute r{static_cast<const int32_t *>(route), moe_route_slots(n_pairs, n_expert)};
  if (dtype == MINFER_DTYPE_F32) return launch_id<F32>(cfg, w, x, y, k, m, choices, x_per_pair, 1, r, dtype);
  if (dtype == MINFER_DTYPE_F16) return launch_id<F16>(cfg, w, x, y, k, m, choices, x_per_pair, 1, r, dtype);
  if (dtype == MINFER_DTYPE_BF16) return launch_id<BF16>(cfg, w, x, y, k, m, choices, x_per_pair, 1, r, dtype);
  cudaError_t err = cudaErrorNotSupported;
  const int per = minfer_dtype_info(dtype).block_values;
  minfer::sdk::visit_block_dtype(dtype, [&](auto tag) {
    using Block = typename decltype(tag)::type;
    err = launch_id<Block>(cfg, w, x, y, k, m, choices, x_per_pair, per, r, dtype);
  });
  return err;
}
