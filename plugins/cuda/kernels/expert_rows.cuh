// plugins/cuda/kernels/expert_rows.cuh — what the decode-token expert kernels (moe.cu) and the
// one-launch FFN (ffn_decode.cu) share: ranking a router row, a warp's gate/up rows and its
// results, and one output row's weighted sum over the chosen experts' down rows.
#pragma once

#include <cstdint>

#include "glu.cuh"
#include "int8_dot.cuh"
#include "launchers.h"
#include "reduce.cuh"

namespace minfer::cuda {
namespace {

// Threads of the router's RMS norm and logit rows (moe_router_decode_kernel, and the
// one-launch FFN's first 256 threads, laid out the same: the same bits).
constexpr int kRouterThreads = 256;

// Whether expert (or dense) weights of this type sit where the kernels' 16-byte loads need them.
inline bool on16(int32_t dtype, const void *w, const void *up) { return minfer_cuda_expert_weights_aligned(dtype, w, up) != 0; }

// top_k's order as one integer: larger values first, NaN after every number, then the lower
// index (-0 and +0 equal, as == has them).
__device__ __forceinline__ uint64_t rank_key(float v, int i) {
  uint32_t u = __float_as_uint(v + 0.0f);  // -0 -> +0
  u = isnan(v) ? 0u : (u >> 31 ? ~u : u | 0x80000000u);
  return uint64_t(u) << 32 | (0xffffffffu - uint32_t(i));
}

// One router row ranked by a block, a thread per expert (t < n hold v, the others nothing):
// each thread counts the keys above its own, and that rank, when below k, is its place in the
// output (no k rounds of reductions one after another). With weights: MOE_WEIGHTS of the same
// logits and ids too. Every thread of the block calls it.
template <bool kWeights>
__device__ __forceinline__ void rank_row(float v, int64_t n, int64_t k, int32_t *out, float *weights, int normalize, float scale,
                                         uint64_t *keys /* n */, float *red /* 32 */) {
  const int t = threadIdx.x;
  const bool real = t < n;
  const uint64_t mine = rank_key(v, t);
  __syncthreads();  // a previous row is done with keys
  if (real) keys[t] = mine;
  __syncthreads();
  int ranks[4] = {};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4)
#pragma unroll
    for (int u = 0; u < 4; ++u) ranks[u] += keys[j + u] > mine;
  for (; j < n; ++j) ranks[0] += keys[j] > mine;
  const int rank = ranks[0] + ranks[1] + ranks[2] + ranks[3];
  const bool chosen = real && rank < k;
  if (chosen) out[rank] = t;
  if (!kWeights) return;
  const float mx = block_max(real ? v : -INFINITY, red);
  const float all = block_sum(real ? expf(v - mx) : 0.0f, red);
  const float e = chosen ? expf(v - mx) : 0.0f;
  const float sum = block_sum(e, red);
  if (chosen) weights[rank] = e / (normalize ? sum : all) * scale;
}

// A warp's kRowsT expert rows: gate rows then up rows where gated (only r % kPart < live
// are real; the rest repeat a real one so every load stays inside the weights).
template <class Block, int kRowsT, int kPart, bool kGated>
__device__ __forceinline__ void expert_rows(const Block *(&row)[kRowsT], const Block *w, const Block *up, int64_t e, int64_t m, int64_t o0,
                                            int live, int64_t nb) {
#pragma unroll
  for (int r = 0; r < kRowsT; ++r) {
    const int64_t o = o0 + (r % kPart < live ? r % kPart : 0);
    row[r] = (kGated && r >= kPart ? up : w) + (e * m + o) * nb;
  }
}

// The warp's sums of acc (row r, token j at r * kT + j) and, gated, act(gate) * up: returns
// whether this lane holds a result, and which (r, j) it is.
template <int kN, int kT, int kPart, bool kGated>
__device__ __forceinline__ bool lane_result(float (&acc)[kN], int act, float &v, int &r, int &j) {
  constexpr int kShift = kN == 32 ? 0 : kN == 16 ? 1 : kN == 8 ? 2 : kN == 4 ? 3 : 4;  // warp_sums: value lane >> kShift
  const int lane = threadIdx.x & 31;
  v = warp_sums(acc);
  const int idx = lane >> kShift;
  r = idx / kT, j = idx % kT;
  if (kGated) v = glu(act, v, __shfl_down_sync(0xffffffffu, v, (kPart * kT) << kShift));
  return (lane & ((1 << kShift) - 1)) == 0;
}

constexpr int kSumMaxChoices = 32;  // choices an output row sums at most (shared arrays of that many)
constexpr int kSumUnroll = 4;  // sub-blocks a lane has in flight

// Row o of each chosen expert dotted with its pair's activations, each product weighted by the
// pair's weight: the lane's part of the sum, whole sub-blocks a lane, kSumUnroll in flight.
template <class Block>
__device__ __forceinline__ float expert_row_sum(const Block *const *expert, const float *weight, const minfer_cuda_q8_act *xs, int64_t o,
                                                int64_t nb, int64_t ns, int64_t total, int lane) {
  float acc = 0;
  for (int64_t j0 = lane; j0 < total; j0 += 32 * kSumUnroll) {
    SubBlock sb[kSumUnroll];
    int pair[kSumUnroll];
#pragma unroll
    for (int u = 0; u < kSumUnroll; ++u) {
      const int64_t j = j0 + 32 * u;
      pair[u] = int(j / ns);
      if (j < total) unpack_sub<Block, true>(expert[pair[u]] + o * nb, j - pair[u] * ns, sb[u]);
    }
#pragma unroll
    for (int u = 0; u < kSumUnroll; ++u)
      if (j0 + 32 * u < total) acc += weight[pair[u]] * sub_dot<Block>(sb[u], xs[j0 + 32 * u]);
  }
  return acc;
}
// The same a lane whole sub-block pairs (SubPair: Q4_K, Q6_K), three in flight (Qwen3-30B-A3B's
// 8 choices x 3 blocks x 4 pairs: one pass of a warp).
constexpr int kPairUnroll = 3;
template <class Block>
__device__ __forceinline__ float expert_row_sum_pairs(const Block *const *expert, const float *weight, const minfer_cuda_q8_act *xs,
                                                      int64_t o, int64_t nb, int64_t ns, int64_t total, int lane) {
  using P = SubPair<Block>;
  const int64_t per = nb * 4, units = total / 2;  // pairs a choice: 4 a block
  float acc = 0;
  for (int64_t u0 = lane; u0 < units; u0 += 32 * kPairUnroll) {
    typename P::Raw raw[kPairUnroll];
    int pair[kPairUnroll], p[kPairUnroll];
    int64_t sub[kPairUnroll];
#pragma unroll
    for (int u = 0; u < kPairUnroll; ++u) {
      const int64_t v = u0 + 32 * u;
      if (v >= units) break;
      pair[u] = int(v / per);
      const int64_t r = v - pair[u] * per, blk = r >> 2;
      p[u] = int(r & 3);
      P::load(expert[pair[u]] + o * nb + blk, p[u], raw[u]);
      sub[u] = pair[u] * ns + blk * 8 + P::first(p[u]);
    }
#pragma unroll
    for (int u = 0; u < kPairUnroll; ++u) {
      if (u0 + 32 * u >= units) break;
      SubBlock a, b;
      P::unpack(raw[u], p[u], a, b);
      acc += weight[pair[u]] * (sub_dot<Block>(a, xs[sub[u]]) + sub_dot<Block>(b, xs[sub[u] + P::kSecond]));
    }
  }
  return acc;
}

}  // namespace
}  // namespace minfer::cuda
