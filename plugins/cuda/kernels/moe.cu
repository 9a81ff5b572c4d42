// plugins/cuda/kernels/moe.cu — mixture-of-experts kernels: routing (top-k, the chosen
// experts' weights, the weighted sum) and the expert matmul on 8-bit activations.
//
// MATMUL_ID runs in two launches after x is quantized: the route kernel groups the step's
// (row, choice) pairs by expert on the device (counts, offsets, a scatter: no host sync, so
// decode steps stay in CUDA graphs), then mmvq_id_kernel gives each (active expert, group of
// rows) to a block: it stages up to kT of the expert's pairs' activations in shared memory and
// its warps read each weight row once for all of them, as mmvq.cu does for a dense matmul. A
// decode token thus reads only its k experts' rows; a prompt reads each chosen expert once per
// kT of its tokens.
#include <algorithm>
#include <type_traits>

#include "expert_rows.cuh"
#include "grid.cuh"
#include "int8_dot.cuh"
#include "moe_route.cuh"
#include "plain4.cuh"
#include "reduce.cuh"
#include "rms_row.cuh"

namespace minfer::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kRows = 2;    // rows per warp, as mmvq.cu measured
constexpr int kUnroll = 2;
constexpr int kTokens = 8;  // pairs per pass over an expert's rows
constexpr int kMaxExperts = 8192;  // the route kernel's shared counters
constexpr int kRankMax = 1024;     // top_k_rank_kernel: a thread an expert

// (value, index) a comes before b in top_k's order: larger first, NaN after every number,
// equal values (and NaNs) by index.
__device__ __forceinline__ bool before(float a, int ia, float b, int ib) {
  const bool na = isnan(a), nb = isnan(b);
  if (na != nb) return nb;
  if (!na && a != b) return a > b;
  return ia < ib;
}

// A warp per row: k rounds, each the first element after the previous pick (no memory of
// what was taken, so any k and n run in registers).
__global__ void top_k_kernel(const float *x, int32_t *out, int64_t n, int64_t k, int64_t rows) {
  wait_for_inputs();
  const int lane = threadIdx.x & 31;
  for (int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; r < rows; r += (int64_t(gridDim.x) * blockDim.x) >> 5) {
    const float *v = x + r * n;
    float pv = 0;
    int pi = -1;  // the previous pick; -1: none yet
    for (int64_t j = 0; j < k; ++j) {
      float bv = 0;
      int bi = -1;
      for (int64_t i = lane; i < n; i += 32) {
        const float xv = v[i];
        if (pi >= 0 && !before(pv, pi, xv, int(i))) continue;  // at or before the previous pick
        if (bi < 0 || before(xv, int(i), bv, bi)) bv = xv, bi = int(i);
      }
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi >= 0 && (bi < 0 || before(ov, oi, bv, bi))) bv = ov, bi = oi;
      }
      if (lane == 0) out[r * k + j] = bi;
      pv = bv, pi = bi;
    }
  }
}

// Router rows of at most kRankMax experts, a block per row (rank_row). With weights: a
// router's two small launches become one.
template <bool kWeights>
__global__ void top_k_rank_kernel(const float *x, int32_t *out, float *weights, int64_t n, int64_t k, int64_t rows, int normalize,
                                  float scale) {
  wait_for_inputs();
  __shared__ uint64_t keys[kRankMax];
  __shared__ float red[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    rank_row<kWeights>(threadIdx.x < n ? x[r * n + threadIdx.x] : 0.0f, n, k, out + r * k, kWeights ? weights + r * k : nullptr, normalize,
                       scale, keys, red);
}

// A decode token's router in one launch: its RMS norm, the router matmul (plain weights T, a
// block a row) and the top-k with the chosen experts' weights. Each block normalizes x itself
// (rms_row.cuh: the norm kernel's bits) and block 0 writes it for the experts; a block's
// first router row loads before the wait (weights: no kernel writes them); the last block to
// finish ranks the logits (counter: 0 before, reset to 0 by that block).
template <class T>
__global__ void __launch_bounds__(kRouterThreads) moe_router_decode_kernel(const float *x, const float *norm_w, float eps, float *h, const T *w,
                                                                            int64_t k, int64_t n, float *logits, int32_t *ids, float *weights,
                                                                            int64_t kk, int normalize, float scale, unsigned *counter) {
  __shared__ uint64_t keys[kRouterThreads];
  __shared__ float red[32];
  __shared__ bool last;
  const int t = threadIdx.x;
  float4 wv[kRmsCached];
  const auto load_row = [&](int64_t o) {
#pragma unroll
    for (int u = 0; u < kRmsCached; ++u) {
      const int64_t i = t + int64_t(u) * kRouterThreads;
      if (i < k / 4) wv[u] = load4(w + o * k + 4 * i);
    }
  };
  if (blockIdx.x < n) load_row(blockIdx.x);
  wait_for_inputs();
  RmsRow row;
  rms_row_load(x, norm_w, k, eps, row, red);
  if (blockIdx.x == 0)
#pragma unroll
    for (int u = 0; u < kRmsCached; ++u) {
      const int64_t i = t + int64_t(u) * kRouterThreads;
      if (i < k / 4) reinterpret_cast<float4 *>(h)[i] = rms_row_value(row, u);
    }
  for (int64_t o = blockIdx.x; o < n; o += gridDim.x) {
    if (o != blockIdx.x) load_row(o);
    float acc = 0;
#pragma unroll
    for (int u = 0; u < kRmsCached; ++u) {
      if (t + int64_t(u) * kRouterThreads >= k / 4) break;
      const float4 hv = rms_row_value(row, u);
      acc += hv.x * wv[u].x + hv.y * wv[u].y + hv.z * wv[u].z + hv.w * wv[u].w;
    }
    acc = block_sum(acc, red);
    if (t == 0) logits[o] = acc;
  }
  release_dependents();  // what is left: the last block's ranking (grid.cuh)
  __threadfence();  // this block's logits are visible before it counts itself done
  __syncthreads();
  if (t == 0) last = atomicAdd(counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  if (t == 0) *counter = 0;
  rank_row<true>(t < n ? __ldcg(logits + t) : 0.0f, n, kk, ids, weights, normalize, scale, keys, red);
}

// A warp per row: the softmax's maximum and sum over the experts, then each choice's weight.
// An id outside the experts gives NaN (matmul_id reports it).
__global__ void moe_weights_kernel(const float *logits, const int32_t *ids, float *out, int64_t ne, int64_t k, int64_t rows, int normalize,
                                   float scale) {
  wait_for_inputs();
  const int lane = threadIdx.x & 31;
  for (int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; r < rows; r += (int64_t(gridDim.x) * blockDim.x) >> 5) {
    const float *l = logits + r * ne;
    float mx = -INFINITY;
    for (int64_t i = lane; i < ne; i += 32) mx = fmaxf(mx, l[i]);
    mx = warp_max(mx);
    float all = 0;
    for (int64_t i = lane; i < ne; i += 32) all += expf(l[i] - mx);
    all = warp_sum(all);
    float chosen = 0;
    for (int64_t j = lane; j < k; j += 32) {
      const int32_t e = ids[r * k + j];
      chosen += e >= 0 && e < ne ? expf(l[e] - mx) : NAN;
    }
    chosen = warp_sum(chosen);
    const float denom = normalize ? chosen : all;
    for (int64_t j = lane; j < k; j += 32) {
      const int32_t e = ids[r * k + j];
      out[r * k + j] = e >= 0 && e < ne ? expf(l[e] - mx) / denom * scale : NAN;
    }
  }
}

// add non-null: the residual ADD after it too, out = add + sum (the two-launch result's bits).
__global__ void moe_sum_kernel(const float *y, const float *w, const float *add, float *out, int64_t d, int64_t k, int64_t rows) {
  wait_for_inputs();
  MINFER_GRID_STRIDE(i, d * rows) {
    const int64_t r = i / d, c = i - r * d;
    float acc = 0;
    for (int64_t j = 0; j < k; ++j) acc = fmaf(w[r * k + j], y[(r * k + j) * d + c], acc);
    out[i] = add ? add[i] + acc : acc;
  }
}

// One block: count the pairs per expert, offsets by a scan, then scatter the pair indices.
// Within an expert the pairs' order is that of the atomics; each pair's result is its own.
__global__ void moe_route_kernel(const int32_t *ids, int64_t n_pairs, int32_t ne, int32_t *route, int64_t max_slots, float *y, int64_t m,
                                 int32_t *error_flag, int32_t error_tag) {
  wait_for_inputs();
  extern __shared__ int32_t counts[];  // [ne] counts, then [ne] next free place
  int32_t *next = counts + ne;
  for (int e = threadIdx.x; e < ne; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (int64_t p = threadIdx.x; p < n_pairs; p += blockDim.x) {
    const int32_t e = ids[p];
    if (e >= 0 && e < ne) {
      atomicAdd(&counts[e], 1);
    } else {
      if (atomicCAS(error_flag, 0, error_tag) == 0) error_flag[1] = e;
      for (int64_t i = 0; i < m; ++i) y[p * m + i] = NAN;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // a few hundred experts: one thread's scan is quicker than a block's
    int32_t at = 0, active = 0;
    for (int e = 0; e < ne; ++e) {
      next[e] = at;
      if (counts[e]) {
        int32_t *s = route + 1 + 3 * active++;
        s[0] = e, s[1] = at, s[2] = at + counts[e];
      }
      at += counts[e];
    }
    route[0] = active;
  }
  __syncthreads();
  int32_t *pairs = route + 1 + 3 * max_slots;
  for (int64_t p = threadIdx.x; p < n_pairs; p += blockDim.x) {
    const int32_t e = ids[p];
    if (e >= 0 && e < ne) pairs[atomicAdd(&next[e], 1)] = int32_t(p);
  }
}

// Work item = (active expert slot, block of kWarps row groups); a block's pairs are staged kT
// (tpc) at a time. x rows: a pair's own (x_per_pair) or its row's (p / choices).
template <class Block, int kT, bool kGated>
__global__ void __launch_bounds__(kWarps * 32) mmvq_id_kernel(const Block *w, const Block *up, int act, const minfer_cuda_q8_act *x, float *y,
                                                               int64_t k, int64_t m, int64_t choices, int x_per_pair, MoeRoute route,
                                                               int tpc) {
  wait_for_inputs();
  constexpr int kN = kRows * kT;
  constexpr int kPartRows = kGated ? kRows / 2 : kRows;
  extern __shared__ minfer_cuda_q8_act xs[];
  __shared__ int32_t pair_of[kT];
  const int64_t ns = k / 32, nb = k / (32 * QBlock<Block>::kSubs);
  const int64_t groups = (m + kPartRows - 1) / kPartRows, gblocks = (groups + kWarps - 1) / kWarps;
  const int64_t items = route.max_slots * gblocks;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t slot = item / gblocks, gb = item - slot * gblocks;
    if (slot >= route.n_active()) break;  // slots are in order: the rest are inactive too
    const int32_t *sl = route.slot(slot);
    const int64_t e = sl[0], begin = sl[1], end = sl[2];
    const int64_t g = gb * kWarps + (threadIdx.x >> 5), o0 = g * kPartRows;
    const int live = g < groups ? int(m - o0 < kPartRows ? m - o0 : kPartRows) : 0;
    const Block *row[kRows];
    expert_rows<Block, kRows, kPartRows, kGated>(row, w, up, e, m, o0, live, nb);
    for (int64_t p0 = begin; p0 < end; p0 += tpc) {
      const int nt = int(end - p0 < tpc ? end - p0 : tpc);
      __syncthreads();  // the previous pass is done with xs and pair_of
      if (threadIdx.x < nt) pair_of[threadIdx.x] = route.pairs()[p0 + threadIdx.x];
      __syncthreads();
      const int64_t per = ns * int64_t(sizeof(minfer_cuda_q8_act) / 8);
      for (int64_t i = threadIdx.x; i < nt * per; i += blockDim.x) {
        const int64_t j = i / per, piece = i - j * per, src_row = x_per_pair ? pair_of[j] : pair_of[j] / choices;
        reinterpret_cast<int2 *>(xs)[i] = reinterpret_cast<const int2 *>(x + src_row * ns)[piece];
      }
      __syncthreads();
      if (!live) continue;
      float acc[kN];
      rows_dot_acts<Block, kRows, kT, kUnroll, kPartRows, true>(row, live, xs, ns, nt, acc);
      float v;
      int r, j;
      if (!lane_result<kN, kT, kPartRows, kGated>(acc, act, v, r, j) || r >= live || j >= nt) continue;
      y[int64_t(pair_of[j]) * m + o0 + r] = v;
    }
  }
}

// One row of choices (a decode token; its experts are distinct): slot = pair, read straight
// from the ids, no route launch, no staging. The block quantizes its pair's f32 activations
// into shared memory itself (no quantize launch before it: a row is at most a few KiB, read
// from L2), then each warp dots its rows with them. A bad id fills its pair's rows with NaN
// and is recorded as the route kernel records it.
template <class Block, int kRowsT, int kUnrollT, int kMinBlocks, bool kGated>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    mmvq_id_decode_kernel(const Block *w, const Block *up, int act, const float *x, float *y, int64_t k, int64_t m,
                          int64_t choices, int x_per_pair, const int32_t *ids, int64_t n_pairs, int32_t n_expert, int32_t *error_flag,
                          int32_t error_tag) {
  extern __shared__ minfer_cuda_q8_act xs[];
  wait_for_inputs();
  constexpr int kPart = kGated ? kRowsT / 2 : kRowsT;
  const int lane = threadIdx.x & 31;
  const int64_t ns = k / 32, nb = k / (32 * QBlock<Block>::kSubs);
  const int64_t groups = (m + kPart - 1) / kPart, gblocks = (groups + kWarps - 1) / kWarps;
  int64_t in_xs = -1;  // the row of x quantized in xs
  for (int64_t item = blockIdx.x; item < n_pairs * gblocks; item += gridDim.x) {
    const int64_t pair = item / gblocks, gb = item - pair * gblocks;
    const int64_t g = gb * kWarps + (threadIdx.x >> 5), o0 = g * kPart;
    const int live = g < groups ? int(m - o0 < kPart ? m - o0 : kPart) : 0;
    const int32_t e = ids[pair];
    if (e < 0 || e >= n_expert) {  // the whole block's item: no barrier below is skipped by some threads only
      if (lane < live) y[pair * m + o0 + lane] = NAN;
      if (threadIdx.x == 0 && gb == 0 && atomicCAS(error_flag, 0, error_tag) == 0) error_flag[1] = e;
      continue;
    }
    const int64_t xrow = x_per_pair ? pair : pair / choices;
    if (xrow != in_xs) {
      __syncthreads();  // the previous row is read
      quantize_to_shared<1>(x + xrow * k, nullptr, ns, xs);
      __syncthreads();
      in_xs = xrow;
    }
    if (!live) continue;
    const Block *row[kRowsT];
    expert_rows<Block, kRowsT, kPart, kGated>(row, w, up, e, m, o0, live, nb);
    float acc[kRowsT];
    rows_dot_acts<Block, kRowsT, 1, kUnrollT, kPart, true>(row, live, xs, ns, 1, acc);
    if (item + gridDim.x >= n_pairs * gblocks) release_dependents();  // the block's last rows are read (grid.cuh)
    float v;
    int r, j;
    if (lane_result<kRowsT, 1, kPart, kGated>(acc, act, v, r, j) && r < live) y[pair * m + o0 + r] = v;
  }
}

// A decode token's expert down matmul and the weighted sum of its choices (MOE_SUM), with the
// residual add where the plan fuses it: out[o] = add[o] + sum_p wts[p] * (W_ids[p][o] . x_p).
// A warp takes output row o whole — the rows o of all the chosen experts, each lane whole
// sub-blocks of them (choices * ns), each product scaled by its pair's weight before it joins
// the lane's one sum (a fixed order) — so the sum's launch and the choices x m expert outputs
// between the two are gone. The block first quantizes every pair's activations into shared
// memory as one row (pair p's x follows pair p-1's; a sub-block never straddles two). A bad id
// makes every output row NaN and is recorded as the route kernel records it.
// Sixteen warps a block, one block an SM: every block quantizes all the pairs' activations
// (eight pairs of 768 values for Qwen3-30B-A3B), so half as many blocks as at eight warps do
// that twice less often, each in half the passes (H100, 12-layer 30B-A3B slice, three
// alternating rounds: tg128 1,293 against 1,265 t/s).
constexpr int kSumWarps = 16;

template <class Block>
__global__ void __launch_bounds__(kSumWarps * 32, 1)
    mmvq_id_sum_decode_kernel(const Block *w, const float *x, const int32_t *ids, const float *wts, const float *add, float *out, int64_t k,
                              int64_t m, int32_t choices, int32_t n_expert, int32_t *error_flag, int32_t error_tag) {
  extern __shared__ minfer_cuda_q8_act xs[];
  __shared__ const Block *expert[kSumMaxChoices];
  __shared__ float weight[kSumMaxChoices];
  __shared__ int bad;
  wait_for_inputs();
  const int lane = threadIdx.x & 31;
  const int64_t ns = k / 32, nb = k / (32 * QBlock<Block>::kSubs), total = int64_t(choices) * ns;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  if (threadIdx.x < choices) {
    const int32_t e = ids[threadIdx.x];
    const bool ok = e >= 0 && e < n_expert;
    if (!ok) {
      bad = 1;
      if (blockIdx.x == 0 && atomicCAS(error_flag, 0, error_tag) == 0) error_flag[1] = e;
    }
    expert[threadIdx.x] = w + (ok ? int64_t(e) : 0) * m * nb;
    weight[threadIdx.x] = wts[threadIdx.x];
  }
  quantize_to_shared(x, nullptr, total, xs);
  __syncthreads();
  for (int64_t o = int64_t(blockIdx.x) * kSumWarps + (threadIdx.x >> 5); o < m; o += int64_t(gridDim.x) * kSumWarps) {
    float acc = 0;
    if (!bad) {
      if constexpr (kSubPairs<Block>) acc = expert_row_sum_pairs<Block>(expert, weight, xs, o, nb, ns, total, lane);
      else acc = expert_row_sum<Block>(expert, weight, xs, o, nb, ns, total, lane);
    }
    if (o + int64_t(gridDim.x) * kSumWarps >= m) release_dependents();  // the warp's last row is read (grid.cuh)
    acc = warp_sum(acc);
    if (lane == 0) out[o] = bad ? NAN : add ? add[o] + acc : acc;
  }
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" int32_t minfer_cuda_top_k_weights_supported(int64_t n, int64_t) { return n <= kRankMax; }

extern "C" cudaError_t minfer_cuda_top_k_f32(minfer_cuda_launch_cfg *cfg, const float *x, int32_t *out, int64_t n, int64_t k, int64_t rows,
                                             float *weights, int32_t normalize, float scale) {
  if (k < 1 || k > n || n > INT32_MAX) return cudaErrorInvalidValue;
  if (minfer_cuda_top_k_weights_supported(n, k)) {
    const unsigned grid = unsigned(std::min<int64_t>(rows, cfg->max_blocks)), threads = unsigned((n + 31) / 32 * 32);
    if (weights) launch_kernel(cfg, top_k_rank_kernel<true>, grid, threads, 0, x, out, weights, n, k, rows, normalize, scale);
    else launch_kernel(cfg, top_k_rank_kernel<false>, grid, threads, 0, x, out, weights, n, k, rows, normalize, scale);
    return launched(cfg, weights ? "top_k_rank_kernel (with the weights)" : "top_k_rank_kernel");
  }
  if (weights) return cudaErrorNotSupported;
  launch_kernel(cfg, top_k_kernel, grid_for(cfg, rows * 32), kBlock, 0, x, out, n, k, rows);
  return launched(cfg, "top_k_kernel");
}

extern "C" int32_t minfer_cuda_moe_router_decode_supported(int32_t w_dtype, int64_t k, int64_t n_expert, int64_t k_used) {
  const bool plain = w_dtype == MINFER_DTYPE_F32 || w_dtype == MINFER_DTYPE_F16 || w_dtype == MINFER_DTYPE_BF16;
  return plain && k % 4 == 0 && k / 4 <= int64_t(kRmsCached) * kRouterThreads && n_expert <= kRouterThreads && k_used >= 1 &&
         k_used <= n_expert;
}

extern "C" cudaError_t minfer_cuda_moe_router_decode(minfer_cuda_launch_cfg *cfg, const minfer_cuda_moe_router *r) {
  if (!minfer_cuda_moe_router_decode_supported(r->w_dtype, r->k, r->n_expert, r->k_used) ||
      !rms_row_fits(r->k, kRouterThreads, r->x, r->norm_w, r->h) || reinterpret_cast<uintptr_t>(r->w) % 16 != 0 || !r->counter)
    return cudaErrorInvalidValue;
  const unsigned grid = unsigned(std::min<int64_t>(r->n_expert, cfg->max_blocks));
  const auto run = [&](auto *w) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(w)>>;
    launch_kernel(cfg, moe_router_decode_kernel<T>, grid, kRouterThreads, 0, r->x, r->norm_w, r->eps, r->h, w, r->k, r->n_expert, r->logits,
                  r->ids, r->weights, r->k_used, r->normalize, r->scale, r->counter);
  };
  if (r->w_dtype == MINFER_DTYPE_F32) run(static_cast<const float *>(r->w));
  else if (r->w_dtype == MINFER_DTYPE_F16) run(static_cast<const __half *>(r->w));
  else run(static_cast<const __nv_bfloat16 *>(r->w));
  return launched(cfg, "moe_router_decode_kernel (RMS norm, router, top-k and weights)", r->w_dtype);
}

extern "C" cudaError_t minfer_cuda_moe_weights_f32(minfer_cuda_launch_cfg *cfg, const float *logits, const int32_t *ids, float *out,
                                                   int64_t n_expert, int64_t k, int64_t rows, int32_t normalize, float scale) {
  launch_kernel(cfg, moe_weights_kernel, grid_for(cfg, rows * 32), kBlock, 0, logits, ids, out, n_expert, k, rows, normalize, scale);
  return launched(cfg, "moe_weights_kernel");
}

extern "C" cudaError_t minfer_cuda_moe_sum_f32(minfer_cuda_launch_cfg *cfg, const float *y, const float *w, const float *add, float *out, int64_t d, int64_t k,
                                               int64_t rows) {
  launch_kernel(cfg, moe_sum_kernel, grid_for(cfg, d * rows), kBlock, 0, y, w, add, out, d, k, rows);
  return launched(cfg, add ? "moe_sum_kernel (with the residual add)" : "moe_sum_kernel");
}

extern "C" size_t minfer_cuda_moe_route_bytes(int64_t n_pairs, int64_t n_expert) {
  return size_t(1 + 3 * moe_route_slots(n_pairs, n_expert) + n_pairs) * sizeof(int32_t);
}

extern "C" int64_t minfer_cuda_moe_route_max_experts(void) { return kMaxExperts; }

extern "C" cudaError_t minfer_cuda_moe_route(minfer_cuda_launch_cfg *cfg, const int32_t *ids, int64_t n_pairs, int64_t n_expert, void *route,
                                             float *y, int64_t m, int32_t *error_flag, int32_t error_tag) {
  if (n_expert < 1 || n_expert > kMaxExperts || n_pairs > INT32_MAX) return cudaErrorInvalidValue;
  const size_t smem = size_t(2 * n_expert) * sizeof(int32_t);
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(moe_route_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
  }
  launch_kernel(cfg, moe_route_kernel, 1, 1024, smem, ids, n_pairs, int32_t(n_expert), static_cast<int32_t *>(route),
                                                   moe_route_slots(n_pairs, n_expert), y, m, error_flag, error_tag);
  return launched(cfg, "moe_route_kernel");
}

namespace {

template <class Block, bool kGated>
cudaError_t launch_mmvq_id_decode(minfer_cuda_launch_cfg *cfg, const Block *w, const Block *up, int32_t act, const float *x,
                                  float *y, int64_t k, int64_t m, int64_t n_expert, int64_t n_pairs, int64_t choices, int32_t x_per_pair,
                                  const int32_t *ids, int32_t *error_flag, int32_t error_tag, int32_t sm_count, int32_t dtype) {
  // Four rows a warp (two gate + two up where gated), one sub-block of each in flight a lane,
  // three blocks an SM: measured against two rows and two sub-blocks (at two and at three
  // blocks an SM) and four rows with two sub-blocks, it took 1,079 us of kernel time against
  // 1,200 for 96 launches (a 12-layer 30B-A3B slice, 4 tokens), tg128 equal within noise.
  constexpr int kRowsPerWarp = 4, kBlocksPerSm = 3;
  const int64_t part = kGated ? kRowsPerWarp / 2 : kRowsPerWarp, groups = (m + part - 1) / part, gblocks = (groups + kWarps - 1) / kWarps;
  const int64_t blocks = std::min<int64_t>({n_pairs * gblocks, int64_t(sm_count > 0 ? sm_count : 132) * kBlocksPerSm * 4, cfg->max_blocks});
  const size_t smem = size_t(k / 32) * sizeof(minfer_cuda_q8_act);
  launch_kernel(cfg, mmvq_id_decode_kernel<Block, kRowsPerWarp, 1, kBlocksPerSm, kGated>, unsigned(blocks), kWarps * 32, smem, w, up, int(act),
                x, y, k, m, choices, int(x_per_pair), ids, n_pairs, int32_t(n_expert), error_flag, error_tag);
  return launched(cfg, kGated ? "mmvq_id_decode_kernel (gate, up, glu)" : "mmvq_id_decode_kernel", dtype);
}

}  // namespace

// The expert kernels read Q4_K, Q5_K and Q6_K weights in 16-byte pieces (unpack16,
// SubPair), so those weights start on 16 bytes (sessions pack tensors on 256).
extern "C" int32_t minfer_cuda_expert_weights_aligned(int32_t dtype, const void *w, const void *up) {
  const bool wide = dtype == MINFER_DTYPE_Q4_K || dtype == MINFER_DTYPE_Q5_K || dtype == MINFER_DTYPE_Q6_K;
  return !wide || (reinterpret_cast<uintptr_t>(w) % 16 == 0 && reinterpret_cast<uintptr_t>(up) % 16 == 0);
}

extern "C" int32_t minfer_cuda_mmvq_id_decode_supported(int64_t n_pairs, int64_t choices, int64_t k) {
  return n_pairs == choices && k % 32 == 0 && size_t(k / 32) * sizeof(minfer_cuda_q8_act) <= 48 * 1024;
}

extern "C" cudaError_t minfer_cuda_mmvq_id_decode(minfer_cuda_launch_cfg *cfg, int32_t dtype, const void *w, const void *up, int32_t act,
                                                  const float *x, float *y, int64_t k, int64_t m, int64_t n_expert, int64_t n_pairs,
                                                  int64_t choices, int32_t x_per_pair, const int32_t *ids, int32_t *error_flag,
                                                  int32_t error_tag, int32_t sm_count) {
  if (n_pairs < 1) return cudaSuccess;
  if (!minfer_cuda_mmvq_id_decode_supported(n_pairs, choices, k) || !ids || !on16(dtype, w, up)) return cudaErrorInvalidValue;
  cudaError_t e = cudaErrorNotSupported;
  visit_int8_block(dtype, [&](auto tag) {
    using Block = decltype(tag);
    e = up ? launch_mmvq_id_decode<Block, true>(cfg, static_cast<const Block *>(w), static_cast<const Block *>(up), act, x, y, k, m, n_expert,
                                                n_pairs, choices, x_per_pair, ids, error_flag, error_tag, sm_count, dtype)
           : launch_mmvq_id_decode<Block, false>(cfg, static_cast<const Block *>(w), nullptr, act, x, y, k, m, n_expert, n_pairs, choices,
                                                 x_per_pair, ids, error_flag, error_tag, sm_count, dtype);
  });
  return e;
}

extern "C" cudaError_t minfer_cuda_mmvq_id(minfer_cuda_launch_cfg *cfg, int32_t dtype, const void *w, const void *up, int32_t act,
                                           const void *xq, float *y, int64_t k, int64_t m, int64_t n_expert, int64_t n_pairs,
                                           int64_t choices, int32_t x_per_pair, const void *route, int32_t sm_count) {
  if (k % 32 || n_pairs < 1) return n_pairs < 1 ? cudaSuccess : cudaErrorInvalidValue;
  if (!route || !on16(dtype, w, up)) return cudaErrorInvalidValue;
  int device = 0, optin = 48 * 1024;
  if (cudaGetDevice(&device) == cudaSuccess) cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  const size_t per_pair = size_t(k / 32) * sizeof(minfer_cuda_q8_act);
  // An expert has at most one pair a row (top-k choices are distinct), so at most `rows`.
  const int64_t rows = (n_pairs + choices - 1) / choices;
  const int tpc = int(std::min<int64_t>({kTokens, rows, n_pairs, int64_t((size_t(optin) - 1024) / per_pair)}));
  if (tpc < 1) return cudaErrorNotSupported;
  const size_t smem = size_t(tpc) * per_pair;
  const MoeRoute r{static_cast<const int32_t *>(route), moe_route_slots(n_pairs, n_expert)};
  const int64_t part_rows = up ? kRows / 2 : kRows, groups = (m + part_rows - 1) / part_rows, gblocks = (groups + kWarps - 1) / kWarps;
  // Every possible (expert, row block) item, capped at a few waves: the active experts fill
  // the first slots, and blocks past them stop at once.
  const int64_t items = r.max_slots * gblocks, cap = int64_t(sm_count > 0 ? sm_count : 132) * 8;
  const int64_t blocks = std::min<int64_t>({items, cap, cfg->max_blocks});
  cudaError_t e = cudaSuccess;
  const bool known = visit_int8_block(dtype, [&](auto tag) {
    using Block = decltype(tag);
    const auto run = [&](auto kernel) {
      if (smem > 48 * 1024) e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      if (e == cudaSuccess)
        launch_kernel(cfg, kernel, unsigned(blocks), kWarps * 32, smem, static_cast<const Block *>(w), static_cast<const Block *>(up), act,
                                                                     static_cast<const minfer_cuda_q8_act *>(xq), y, k, m, choices,
                                                                     x_per_pair, r, tpc);
    };
    if (up) tpc <= 4 ? run(mmvq_id_kernel<Block, 4, true>) : run(mmvq_id_kernel<Block, kTokens, true>);
    else tpc <= 4 ? run(mmvq_id_kernel<Block, 4, false>) : run(mmvq_id_kernel<Block, kTokens, false>);
  });
  if (!known) return cudaErrorNotSupported;
  if (e != cudaSuccess) return e;
  return launched(cfg, up ? "mmvq_id_kernel (gate, up, glu)" : "mmvq_id_kernel", dtype);
}

extern "C" int32_t minfer_cuda_mmvq_id_sum_decode_supported(int32_t dtype, int64_t choices, int64_t k) {
  return minfer_cuda_mmvq_supported(dtype) && choices >= 1 && choices <= kSumMaxChoices && k % 32 == 0 &&
         size_t(choices * (k / 32)) * sizeof(minfer_cuda_q8_act) <= 48 * 1024;
}

extern "C" cudaError_t minfer_cuda_mmvq_id_sum_decode(minfer_cuda_launch_cfg *cfg, int32_t dtype, const void *w, const float *x, const int32_t *ids,
                                                      const float *wts, const float *add, float *out, int64_t k, int64_t m, int64_t n_expert,
                                                      int64_t choices, int32_t *error_flag, int32_t error_tag, int32_t sm_count) {
  if (!minfer_cuda_mmvq_id_sum_decode_supported(dtype, choices, k) || !ids || !wts || !on16(dtype, w, nullptr)) return cudaErrorInvalidValue;
  const size_t smem = size_t(choices * (k / 32)) * sizeof(minfer_cuda_q8_act);
  // A row a warp: m / 16 blocks (2048 rows: 128), capped at one wave.
  const int64_t blocks = std::min<int64_t>({(m + kSumWarps - 1) / kSumWarps, int64_t(sm_count > 0 ? sm_count : 132), cfg->max_blocks});
  visit_int8_block(dtype, [&](auto tag) {
    using Block = decltype(tag);
    launch_kernel(cfg, mmvq_id_sum_decode_kernel<Block>, unsigned(blocks), kSumWarps * 32, smem, static_cast<const Block *>(w), x, ids, wts, add,
                  out, k, m, int32_t(choices), int32_t(n_expert), error_flag, error_tag);
  });
  return launched(cfg, add ? "mmvq_id_sum_decode_kernel (with the residual add)" : "mmvq_id_sum_decode_kernel", dtype);
}
