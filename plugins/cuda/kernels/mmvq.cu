// plugins/cuda/kernels/mmvq.cu — matmul with 8-bit activations for a few tokens: y[t] = W x[t]
// for the block types of qblock.cuh (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K), in dp4a
// dot products, and the kernel that quantizes activations for it and for MMQ (mmq.cu).
//
// The activations are quantized once per call to 32-value blocks (int8 + scale, and the
// scaled sum the types with a minimum need). A block copies up to kTokens tokens of them into
// shared memory, then its warps take rows: each lane whole 32-value sub-blocks (qblock.cuh),
// kUnroll of them loaded before any is used (enough bytes in flight to keep memory busy), each
// dotted with every token's activations four bytes per dp4a — a few tokens read the weights
// once. (Reading the activations from global memory per row, as the first version did, made
// a 4-token 7B FFN matmul 2.6x the one-token one.) One token takes gemv.cu's kernel instead,
// which quantizes x itself.
#include <algorithm>

#include "grid.cuh"
#include "int8_dot.cuh"
#include "minfer/blocks.h"
#include "minfer/dtype.h"
#include "reduce.cuh"


namespace minfer::cuda {
namespace {

constexpr int kWarps = 8;   // rows per 256-thread block
constexpr int kTokens = 8;  // tokens per weight read

// Many tokens' activations (the prefill matmuls' input): four lanes per block of 32 values,
// 16-byte loads. The warp goes round whole (quantize8's shuffles); lanes past the end carry
// zeros and write nothing. Block b's values are x[32 b...]; Out says where its results go.
template <class Out>
__device__ __forceinline__ void quantize_blocks(const float *x, int64_t n_slots, Out out) {
  const int sub = threadIdx.x & 3;
  const int64_t per_round = (int64_t(gridDim.x) * blockDim.x) >> 2;
  for (int64_t b0 = ((int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5) << 3; b0 < n_slots; b0 += per_round) {
    const int64_t slot = b0 + ((threadIdx.x & 31) >> 2);
    int64_t b = -1;  // the slot's block of x; -1: padding (zeros written) or past the end
    const bool live = slot < n_slots && (b = out.block(slot)) >= 0;
    float4 v0 = make_float4(0, 0, 0, 0), v1 = v0;
    if (live) {
      const float4 *src = reinterpret_cast<const float4 *>(x + b * 32 + sub * 8);
      v0 = src[0], v1 = src[1];
    }
    const Q8Part r = quantize8(v0, v1);
    if (slot < n_slots) out.write(slot, sub, r);
  }
}

// minfer_cuda_q8_act: slot b is block b.
struct PlainBlocks {
  minfer_cuda_q8_act *q;
  __device__ int64_t block(int64_t b) const { return b; }
  __device__ void write(int64_t b, int sub, const Q8Part &r) const {
    reinterpret_cast<int2 *>(q[b].qs)[sub] = make_int2(r.w0, r.w1);
    if (sub == 0) q[b].d = r.d, q[b].s = r.s;
  }
};

// minfer_cuda_q8_act4: a token has `runs` runs of four slots; slots past its kb blocks are padding.
struct BlockRuns {
  minfer_cuda_q8_act4 *q;
  int64_t kb, runs;
  __device__ int64_t block(int64_t slot) const {
    const int64_t t = slot / (runs * 4), j = slot - t * runs * 4;
    return j < kb ? t * kb + j : -1;
  }
  __device__ void write(int64_t slot, int sub, const Q8Part &r) const {
    minfer_cuda_q8_act4 &run = q[slot >> 2];
    const int i = int(slot & 3);
    reinterpret_cast<int2 *>(run.qs + 8 * i)[sub] = make_int2(r.w0, r.w1);
    if (sub == 0) run.ds[i] = make_float2(r.d, r.s);
  }
};

template <class Out>
__global__ void quantize_q8_act_kernel(const float *x, int64_t n_slots, Out out) {
  quantize_blocks(x, n_slots, out);
}

constexpr int kUnroll = 4;

// tpc: tokens per pass (<= kTokens), as many as the shared memory holds; more tokens take
// several passes over the weights.
template <class Block>
__global__ void __launch_bounds__(kWarps * 32) mmvq_kernel(const Block *w, const minfer_cuda_q8_act *x, float *y, int64_t k, int64_t m,
                                                          int64_t tokens, int tpc) {
  extern __shared__ minfer_cuda_q8_act xs[];  // tpc tokens' activation blocks, token-major
  const int lane = threadIdx.x & 31;
  const int64_t ns = k / 32, nb = k / (32 * QBlock<Block>::kSubs);  // sub-blocks, blocks per row
  static_assert(sizeof(minfer_cuda_q8_act) % 4 == 0, "copied as 4-byte words");
  for (int64_t t0 = 0; t0 < tokens; t0 += tpc) {
    const int nt = int(tokens - t0 < tpc ? tokens - t0 : tpc);
    __syncthreads();  // the previous pass's rows are done with xs
    const int64_t words = int64_t(nt) * ns * int64_t(sizeof(minfer_cuda_q8_act) / 4);
    const int32_t *src = reinterpret_cast<const int32_t *>(x + t0 * ns);
    for (int64_t i = threadIdx.x; i < words; i += blockDim.x) reinterpret_cast<int32_t *>(xs)[i] = src[i];
    __syncthreads();
    for (int64_t o = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5); o < m; o += int64_t(gridDim.x) * kWarps) {
      const Block *row = w + o * nb;
      float acc[kTokens];
#pragma unroll
      for (int j = 0; j < kTokens; ++j) acc[j] = 0;
      for (int64_t s0 = lane; s0 < ns; s0 += 32 * kUnroll) {
        SubBlock s[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (s0 + 32 * u < ns) unpack_sub(row, s0 + 32 * u, s[u]);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (s0 + 32 * u >= ns) break;
#pragma unroll
          for (int j = 0; j < kTokens; ++j)
            if (j < nt) acc[j] += sub_dot<Block>(s[u], xs[j * ns + s0 + 32 * u]);
        }
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
  quantize_q8_act_kernel<<<grid_for(cfg, blocks * 4), kBlock, 0, cfg->stream>>>(x, blocks, PlainBlocks{static_cast<minfer_cuda_q8_act *>(q)});
  return launched(cfg, "quantize_q8_act_kernel");
}

extern "C" size_t minfer_cuda_mmq_x_bytes(int64_t k, int64_t tokens) {
  return size_t((k / 32 + 3) / 4) * size_t(tokens) * sizeof(minfer_cuda_q8_act4);
}

extern "C" cudaError_t minfer_cuda_quantize_mmq_x(minfer_cuda_launch_cfg *cfg, const float *x, void *q, int64_t k, int64_t tokens) {
  if (k % 32) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(q) % 16) return cudaErrorMisalignedAddress;  // MMQ copies 16-byte pieces
  const BlockRuns out{static_cast<minfer_cuda_q8_act4 *>(q), k / 32, (k / 32 + 3) / 4};
  const int64_t slots = out.runs * 4 * tokens;
  quantize_q8_act_kernel<<<grid_for(cfg, slots * 4), kBlock, 0, cfg->stream>>>(x, slots, out);
  return launched(cfg, "quantize_q8_act_kernel (MMQ runs of four blocks)");
}

extern "C" int minfer_cuda_mmvq_supported(int32_t dtype) {
  return visit_int8_block(dtype, [](auto) {});
}

extern "C" cudaError_t minfer_cuda_mmvq(minfer_cuda_launch_cfg *cfg, int32_t dtype, const void *w, const void *xq, float *y,
                                        int64_t k, int64_t m, int64_t tokens, int32_t sm_count) {
  // As many tokens per pass as fit the shared memory a block may opt into (7B ffn_down:
  // 592 blocks of 36 bytes a token, 8 tokens in 170 KiB).
  int device = 0, optin = 48 * 1024;
  if (cudaGetDevice(&device) == cudaSuccess) cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  const size_t per_token = size_t(k / 32) * sizeof(minfer_cuda_q8_act);
  const int tpc = int(std::min<int64_t>({kTokens, tokens, int64_t(size_t(optin) / per_token)}));
  if (tpc < 1) return cudaErrorNotSupported;  // one token's activations do not fit: k beyond ~200k
  const size_t smem = size_t(tpc) * per_token;
  // About two blocks per SM, each walking many rows: the activations are copied once per block.
  const int64_t blocks = std::min<int64_t>((m + kWarps - 1) / kWarps, int64_t(sm_count > 0 ? sm_count : 132) * 2);
  const unsigned grid = unsigned(blocks < cfg->max_blocks ? blocks : cfg->max_blocks);
  const auto *xa = static_cast<const minfer_cuda_q8_act *>(xq);
  cudaError_t e = cudaSuccess;
  const bool known = visit_int8_block(dtype, [&](auto tag) {
    using Block = decltype(tag);
    if (smem > 48 * 1024) e = cudaFuncSetAttribute(mmvq_kernel<Block>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e == cudaSuccess)
      mmvq_kernel<Block><<<grid, kWarps * 32, smem, cfg->stream>>>(static_cast<const Block *>(w), xa, y, k, m, tokens, tpc);
  });
  if (!known) return cudaErrorNotSupported;
  if (e != cudaSuccess) return e;
  return launched(cfg, "mmvq_kernel", dtype);
}
