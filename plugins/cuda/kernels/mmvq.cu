// plugins/cuda/kernels/mmvq.cu — matmul with 8-bit activations for a few tokens: y[t] = W x[t]
// for the block types of qblock.cuh (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K), in dp4a
// dot products, and the kernel that quantizes activations for it and for MMQ (mmq.cu).
//
// The activations are quantized once per call to 32-value blocks (int8 + scale, and the
// scaled sum the types with a minimum need). A block copies up to kTokens tokens of them into
// shared memory, then each warp takes kRows rows at a time: each lane whole 32-value
// sub-blocks (qblock.cuh) of all of them, each dotted with every token's activations four
// bytes per dp4a — a few tokens read the weights once, and an activation block read from
// shared memory serves kRows rows. The warp's kRows x tokens sums are reduced together
// (warp_sums). One token takes gemv.cu's kernel instead, which quantizes x itself.
#include <algorithm>

#include "glu.cuh"
#include "grid.cuh"
#include "int8_dot.cuh"
#include "minfer/blocks.h"
#include "minfer/dtype.h"
#include "reduce.cuh"


namespace minfer::cuda {
namespace {

constexpr int kWarps = 8;   // warps per 256-thread block
// Measured on the H200 (7B gate, down and QKV shapes, Q4_0, 2-8 tokens): two rows of two
// sub-blocks per lane at three blocks per SM beat four rows of one at two (gate at 4 tokens
// 26.7 vs 35.6 us; down 41.8 vs 61.0) and four rows of two at one (51.7).
constexpr int kRows = 2;      // rows per warp
constexpr int kUnroll = 2;    // sub-blocks per lane and row in flight
constexpr int kMinBlocks = 3; // blocks per SM the registers must allow
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
  wait_for_inputs();
  quantize_blocks(x, n_slots, out);
}

// x * w / rms(x) for each token in MMQ's runs: an RMS norm folded into the quantizing before
// a few-token matmul (few_token_mma.cu), which saves the norm's own launch and its f32
// output. A block per token: its x^2 summed first, then quantized with the scale (blockDim.x
// a multiple of 32: whole warps go round for quantize8's shuffles).
__global__ void rms_norm_quantize_kernel(const float *x, const float *w, float eps, int64_t k, BlockRuns out) {
  wait_for_inputs();
  __shared__ float scratch[32];
  const float *xt = x + int64_t(blockIdx.x) * k;
  float ss = 0;
  for (int64_t i = 4 * int64_t(threadIdx.x); i < k; i += 4 * int64_t(blockDim.x)) {
    const float4 v = *reinterpret_cast<const float4 *>(xt + i);
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  const float scale = rsqrtf(block_sum(ss, scratch) / float(k) + eps);
  const int sub = threadIdx.x & 3;
  const int64_t slots = out.runs * 4, first = int64_t(blockIdx.x) * slots;
  for (int64_t j0 = 0; j0 < slots; j0 += blockDim.x >> 2) {
    const int64_t j = j0 + (threadIdx.x >> 2);
    float4 v0 = make_float4(0, 0, 0, 0), v1 = v0;
    if (j < out.kb) {
      const float4 *xv = reinterpret_cast<const float4 *>(xt + j * 32 + sub * 8), *wv = reinterpret_cast<const float4 *>(w + j * 32 + sub * 8);
      const float4 a = xv[0], b = xv[1], wa = wv[0], wb = wv[1];
      v0 = make_float4(a.x * wa.x * scale, a.y * wa.y * scale, a.z * wa.z * scale, a.w * wa.w * scale);
      v1 = make_float4(b.x * wb.x * scale, b.y * wb.y * scale, b.z * wb.z * scale, b.w * wb.w * scale);
    }
    const Q8Part r = quantize8(v0, v1);
    if (j < slots) out.write(first + j, sub, r);
  }
}

// The weights of one launch, sharing x: part i's row groups (kRows rows each; kRows / 2 of
// a gate and as many of its up weight gated) are [groups_end[i-1], groups_end[i]).
struct MmvqParts {
  const void *w[kMinferCudaMmqMaxParts];
  float *y[kMinferCudaMmqMaxParts];
  const float *add[kMinferCudaMmqMaxParts];  // NULL, or added: per row (add_broadcast) or per value
  int64_t m[kMinferCudaMmqMaxParts], groups_end[kMinferCudaMmqMaxParts];
  int add_broadcast[kMinferCudaMmqMaxParts];
  const void *up;  // gated: one part, the gate; y = act(gate x) * (up x)
  int act;         // MINFER_CUDA_GLU_*
};

// Part p's entry, by selects (a run-time index would copy the parameter to local memory).
template <class T>
__device__ __forceinline__ T pick(const T (&a)[kMinferCudaMmqMaxParts], int p) {
  static_assert(kMinferCudaMmqMaxParts == 3, "pick() spells out three parts");
  return p == 0 ? a[0] : p == 1 ? a[1] : a[2];
}

// A warp takes kRows rows at once, each lane the same sub-blocks of all of them: every
// activation block read from shared memory serves kRows rows (one row at a time, the reads
// were the limit: a 4-token 7B gate matmul cost 2.4x the one-token one), and kRows x kUnroll
// sub-blocks of weights are in flight per lane. tpc: tokens per pass (<= kT), as many as the shared memory
// holds; more tokens take several passes over the weights.
template <class Block, int kT, bool kGated>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) mmvq_kernel(const __grid_constant__ MmvqParts parts, const minfer_cuda_q8_act *x,
                                                                      int64_t k, int64_t tokens, int tpc) {
  wait_for_inputs();
  constexpr int kN = kRows * kT;  // sums per warp: row r, token j is value r * kT + j
  constexpr int kPartRows = kGated ? kRows / 2 : kRows;  // rows of the part per group
  extern __shared__ minfer_cuda_q8_act xs[];  // tpc tokens' activation blocks, token-major
  const int lane = threadIdx.x & 31;
  const int64_t ns = k / 32, nb = k / (32 * QBlock<Block>::kSubs);  // sub-blocks, blocks per row
  const int64_t groups = parts.groups_end[kMinferCudaMmqMaxParts - 1];
  static_assert(sizeof(minfer_cuda_q8_act) % 8 == 0, "copied and read as 8-byte pieces");
  for (int64_t t0 = 0; t0 < tokens; t0 += tpc) {
    const int nt = int(tokens - t0 < tpc ? tokens - t0 : tpc);
    __syncthreads();  // the previous pass's rows are done with xs
    const int64_t pieces = int64_t(nt) * ns * int64_t(sizeof(minfer_cuda_q8_act) / 8);
    const int2 *src = reinterpret_cast<const int2 *>(x + t0 * ns);
    for (int64_t i = threadIdx.x; i < pieces; i += blockDim.x) reinterpret_cast<int2 *>(xs)[i] = src[i];
    __syncthreads();
    for (int64_t g = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5); g < groups; g += int64_t(gridDim.x) * kWarps) {
      const int p = g < parts.groups_end[0] ? 0 : g < parts.groups_end[1] ? 1 : 2;
      const int64_t m = pick(parts.m, p), o0 = (g - (p == 0 ? 0 : pick(parts.groups_end, p - 1))) * kPartRows;
      const int live = m - o0 < kPartRows ? int(m - o0) : kPartRows;  // rows of the group inside the part
      const Block *w = static_cast<const Block *>(pick(parts.w, p));
      const Block *row[kRows];  // gated: gate rows, then the same rows of up
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        row[r] = kGated && r >= kPartRows ? static_cast<const Block *>(parts.up) + (o0 + r - kPartRows) * nb : w + (o0 + r) * nb;
      float acc[kN];
      rows_dot_acts<Block, kRows, kT, kUnroll, kPartRows>(row, live, xs, ns, nt, acc);
      float v = warp_sums(acc);
      constexpr int kShift = kN == 32 ? 0 : kN == 16 ? 1 : kN == 8 ? 2 : 3;  // 5 - log2(kN)
      const int idx = lane >> kShift, r = idx / kT, j = idx % kT;
      if (kGated) {
        const float u = __shfl_down_sync(0xffffffffu, v, (kPartRows * kT) << kShift);  // up's row r, token j
        v = glu(parts.act, v, u);
      }
      if ((lane & ((1 << kShift) - 1)) || r >= live || j >= nt) continue;  // r < live: a gate row gated
      const int64_t at = (t0 + j) * m + o0 + r;
      const float *add = pick(parts.add, p);
      pick(parts.y, p)[at] = add ? v + add[pick(parts.add_broadcast, p) ? o0 + r : at] : v;
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
  launch_kernel(cfg, quantize_q8_act_kernel<PlainBlocks>, grid_for(cfg, blocks * 4), kBlock, 0, x, blocks, PlainBlocks{static_cast<minfer_cuda_q8_act *>(q)});
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
  launch_kernel(cfg, quantize_q8_act_kernel<BlockRuns>, grid_for(cfg, slots * 4), kBlock, 0, x, slots, out);
  return launched(cfg, "quantize_q8_act_kernel (MMQ runs of four blocks)");
}

extern "C" cudaError_t minfer_cuda_rms_norm_quantize_mmq_x(minfer_cuda_launch_cfg *cfg, const float *x, const float *norm_w, float eps, void *q,
                                                       int64_t k, int64_t tokens) {
  if (k % 32 || tokens < 1) return tokens < 1 ? cudaSuccess : cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(q) % 16 || reinterpret_cast<uintptr_t>(x) % 16 || reinterpret_cast<uintptr_t>(norm_w) % 16)
    return cudaErrorMisalignedAddress;
  const BlockRuns out{static_cast<minfer_cuda_q8_act4 *>(q), k / 32, (k / 32 + 3) / 4};
  // Four lanes a block of 32 values: one pass over a 3584-value row at 448 threads.
  const int threads = int(std::min<int64_t>(1024, std::max<int64_t>(128, (out.runs * 16 + 31) / 32 * 32)));
  launch_kernel(cfg, rms_norm_quantize_kernel, unsigned(tokens), threads, 0, x, norm_w, eps, k, out);
  return launched(cfg, "rms_norm_quantize_kernel (MMQ runs of four blocks)");
}

extern "C" int minfer_cuda_mmvq_supported(int32_t dtype) {
  return visit_int8_block(dtype, [](auto) {});
}

extern "C" cudaError_t minfer_cuda_mmvq(minfer_cuda_launch_cfg *cfg, int32_t dtype, const minfer_cuda_mmq_part *in, int32_t n_parts,
                                        const void *up, int32_t act, const void *xq, int64_t k, int64_t tokens, int32_t sm_count) {
  if (n_parts < 1 || n_parts > kMinferCudaMmqMaxParts || (up && n_parts != 1)) return cudaErrorInvalidValue;
  // As many tokens per pass as fit the shared memory a block may opt into (7B ffn_down:
  // 592 blocks of 40 bytes a token, 8 tokens in 185 KiB).
  int device = 0, optin = 48 * 1024;
  if (cudaGetDevice(&device) == cudaSuccess) cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  const size_t per_token = size_t(k / 32) * sizeof(minfer_cuda_q8_act);
  const int tpc = int(std::min<int64_t>({kTokens, tokens, int64_t(size_t(optin) / per_token)}));
  if (tpc < 1) return cudaErrorNotSupported;  // one token's activations do not fit: k beyond ~200k
  const size_t smem = size_t(tpc) * per_token;
  MmvqParts parts{};
  const int part_rows = up ? kRows / 2 : kRows;
  int64_t groups = 0;
  for (int i = 0; i < kMinferCudaMmqMaxParts; ++i) {
    if (i < n_parts) {
      parts.w[i] = in[i].w, parts.y[i] = in[i].y, parts.add[i] = in[i].add, parts.m[i] = in[i].m;
      parts.add_broadcast[i] = in[i].add_broadcast;
      groups += (in[i].m + part_rows - 1) / part_rows;
    }
    parts.groups_end[i] = groups;
  }
  parts.up = up;
  parts.act = act;
  // About two blocks per SM, each walking many row groups: the activations are copied once per block.
  // Blocks per SM: kMinBlocks where their activations fit the SM's shared memory (8 tokens of
  // a 7B ffn_down take 185 KiB: one), so the grid is one wave.
  int per_sm_smem = 228 * 1024;
  cudaDeviceGetAttribute(&per_sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  const int per_sm = int(std::max<size_t>(1, std::min<size_t>(kMinBlocks, size_t(per_sm_smem) / (smem + 1024))));
  const int64_t blocks = std::min<int64_t>((groups + kWarps - 1) / kWarps, int64_t(sm_count > 0 ? sm_count : 132) * per_sm);
  const unsigned grid = unsigned(blocks < cfg->max_blocks ? blocks : cfg->max_blocks);
  const auto *xa = static_cast<const minfer_cuda_q8_act *>(xq);
  cudaError_t e = cudaSuccess;
  const bool known = visit_int8_block(dtype, [&](auto tag) {
    using Block = decltype(tag);
    const auto run = [&](auto kernel) {
      if (smem > 48 * 1024) e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      if (e == cudaSuccess) launch_kernel(cfg, kernel, grid, kWarps * 32, smem, parts, xa, k, tokens, tpc);
    };
    // Four tokens or fewer: half the sums to reduce.
    if (up) tpc <= 4 ? run(mmvq_kernel<Block, 4, true>) : run(mmvq_kernel<Block, kTokens, true>);
    else tpc <= 4 ? run(mmvq_kernel<Block, 4, false>) : run(mmvq_kernel<Block, kTokens, false>);
  });
  if (!known) return cudaErrorNotSupported;
  if (e != cudaSuccess) return e;
  return launched(cfg, up ? (act == MINFER_CUDA_GLU_GELU ? "mmvq_kernel (gate, up, gelu)" : "mmvq_kernel (gate, up, silu)") : "mmvq_kernel", dtype);
}
