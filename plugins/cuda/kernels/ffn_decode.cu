// plugins/cuda/kernels/ffn_decode.cu — a decode token's whole FFN as one launch: its RMS norm,
// (routed: the router with its top-k and expert weights,) the gate/up rows with their
// activation, and the down rows with their (weighted) sum and the residual add, as stages of
// one grid, one block an SM, all resident (a cooperative launch), with grid barriers between
// the stages that read what other blocks wrote.
//
// A kernel boundary cost each stage the drain of the last blocks, the next blocks' start and
// their first loads; here a warp's down rows are on their way into shared memory while the
// slowest blocks still finish their gate/up rows, and (routed) every block ranks the logits
// itself, where the router kernel's last block did it alone while the others waited for a
// launch. The routed form computes what its three kernels in moe.cu compute, in the same order
// (the same bits): the norm and router on the first 256 threads as moe_router_decode_kernel
// lays them out, gate/up four rows a warp as mmvq_id_decode_kernel, the down rows by
// expert_row_sum(_pairs) as mmvq_id_sum_decode_kernel. The dense form is the routed one with
// one expert of weight 1 and no router: no logits to wait for, so one barrier. Either may start
// with the attention's output projection and its residual add (kWithO, a stage 0 and one
// barrier more: every block then needs the whole new residual row for its norm), its weights
// of the gate's type.
#include <algorithm>
#include <type_traits>

#include "async_copy.cuh"
#include "expert_rows.cuh"
#include "grid.cuh"
#include "int8_dot.cuh"
#include "plain4.cuh"
#include "reduce.cuh"
#include "rms_row.cuh"

namespace minfer::cuda {
namespace {

constexpr int kFfnWarps = 16, kFfnThreads = kFfnWarps * 32;
constexpr int kFfnRowsPerWarp = 4;  // two gate rows and their up rows, as mmvq_id_decode_kernel
constexpr int kFfnUnroll = 2;       // sub-blocks a lane has in flight a row: a 2048-value row in one trip

struct FfnArgs {
  const float *x, *norm_w, *router;  // router: f32 [k, n_expert] (routed only)
  float eps, scale;
  float *h, *logits, *weights;  // h: the norm's output (block 0 writes it; may be null)
  int32_t *ids;
  int32_t n_expert, k_used, normalize, act, stage_down;  // dense: k_used 1
  const void *gate, *up, *down;
  float *y, *out;
  const float *add;
  int64_t k, m;  // the model's width; an expert's (the FFN's) width
  size_t xg_at, xd_at, stage_at, slot;  // dynamic shared memory: hs [k] f32 at 0, then these
  unsigned *counters;  // [2]: arrivals at the barriers, blocks past the last; 0 before and after
  // kWithO: x = o_add + o_w o_x written first (x is then o_out), o_w [ko, k] of the gate's type.
  const void *o_w;
  const float *o_x, *o_add;
  float *o_out;
  int64_t ko;
};

// Stage 0 (kWithO): the attention's output projection of o_x (quantized into xo), a warp a row
// at a time, and the residual add: o_out = o_add + o_w o_x. weight_one: a shared 1.0f, row: the
// warp's shared slot for its row's address (the row sums take a weight and a row per choice,
// indexed at run time: in registers they would go to local memory). Not inlined: inlined, ptxas
// spilled 100-380 bytes of the kernels' later stages (Q4_0, Q4_K); called, none.
template <class OB>
__device__ __noinline__ void attn_out_rows(const FfnArgs &a, minfer_cuda_q8_act *xo, const float *weight_one, const OB **row,
                                              int64_t blocks) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const OB *ow = static_cast<const OB *>(a.o_w);
  const int64_t ns = a.ko / 32, nb = a.ko / (32 * QBlock<OB>::kSubs);
  for (int64_t o = warp * blocks + blockIdx.x; o < a.k; o += blocks * kFfnWarps) {
    __syncwarp();
    if (lane == 0) row[0] = ow + o * nb;
    __syncwarp();
    float acc;
    if constexpr (kSubPairs<OB>) acc = expert_row_sum_pairs<OB>(row, weight_one, xo, 0, nb, ns, ns, lane);
    else acc = expert_row_sum<OB>(row, weight_one, xo, 0, nb, ns, ns, lane);
    acc = warp_sum(acc);
    if (lane == 0) a.o_out[o] = a.o_add[o] + acc;
  }
}

// Written on the way: h (block 0, where given), routed the logits, ids and weights (block 0),
// the activations y [k_used, m], and out.
template <class GB, class DB, bool kRouted, bool kWithO>
__global__ void __launch_bounds__(kFfnThreads, 1) ffn_decode_kernel(const __grid_constant__ FfnArgs a) {
  constexpr unsigned kBarriers = (kRouted ? 2 : 1) + (kWithO ? 1 : 0);
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ uint64_t keys[kFfnThreads];
  __shared__ float red[32];
  __shared__ int32_t chosen[kSumMaxChoices];
  __shared__ float chosen_w[kSumMaxChoices];
  __shared__ const DB *rows_of[kFfnWarps][kSumMaxChoices];  // a warp's down row of each choice
  __shared__ const GB *o_row[kWithO ? kFfnWarps : 1];  // a warp's output projection row (stage 0)
  float *hs = reinterpret_cast<float *>(smem);
  auto *xg = reinterpret_cast<minfer_cuda_q8_act *>(smem + a.xg_at);
  auto *xd = reinterpret_cast<minfer_cuda_q8_act *>(smem + a.xd_at);
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int64_t k = a.k, m = a.m, blocks = gridDim.x;

  constexpr int kRT = kRouterThreads;
  float4 wv[kRmsCached];
  const auto load_row = [&](int64_t o) {
#pragma unroll
    for (int u = 0; u < kRmsCached; ++u) {
      const int64_t i = t + int64_t(u) * kRT;
      if (t < kRT && i < k / 4) wv[u] = load4(a.router + o * k + 4 * i);
    }
  };
  if constexpr (kWithO) {  // Stage 0: x = the residual + the output projection, a barrier
    wait_for_inputs();
    if (t == 0) chosen_w[0] = 1.0f;
    quantize_to_shared<2>(a.o_x, nullptr, a.ko / 32, xd);  // xd is free until stage 3
    __syncthreads();
    attn_out_rows<GB>(a, xd, chosen_w, &o_row[warp], blocks);
    __syncthreads();  // the block's rows of x are written
    if (t == 0) grid_arrive(a.counters), grid_wait(a.counters, unsigned(blocks));
    __syncthreads();
  }
  // Stage 1: the norm (every block its own copy), routed the router rows of this block (loaded
  // before the wait: weights) and their logits.
  if (kRouted && blockIdx.x < a.n_expert) load_row(blockIdx.x);
  wait_for_inputs();
  RmsRow row;
  rms_row_load<kRT, kWithO>(a.x, a.norm_w, k, a.eps, row, red);  // kWithO: x written by the other blocks, read past L1
#pragma unroll
  for (int u = 0; u < kRmsCached; ++u) {
    const int64_t i = t + int64_t(u) * kRT;
    if (t >= kRT || i >= k / 4) break;
    const float4 v = rms_row_value(row, u);
    reinterpret_cast<float4 *>(hs)[i] = v;
    if (a.h && blockIdx.x == 0) reinterpret_cast<float4 *>(a.h)[i] = v;
  }
  if constexpr (kRouted) {
    for (int64_t o = blockIdx.x; o < a.n_expert; o += blocks) {
      if (o != blockIdx.x) load_row(o);
      float acc = 0;
#pragma unroll
      for (int u = 0; u < kRmsCached; ++u) {
        if (t >= kRT || t + int64_t(u) * kRT >= k / 4) break;
        const float4 hv = rms_row_value(row, u);
        acc += hv.x * wv[u].x + hv.y * wv[u].y + hv.z * wv[u].z + hv.w * wv[u].w;
      }
      acc = block_sum(acc, red);
      if (t == 0) a.logits[o] = acc;
    }
  }
  __syncthreads();  // hs is written; routed, thread 0's logits are this block's last writes of the stage
  const int64_t ns = k / 32;
  quantize_to_shared<1>(hs, nullptr, ns, xg);
  if constexpr (kRouted) {
    if (t == 0) grid_arrive(a.counters), grid_wait(a.counters, (kWithO ? 2 : 1) * unsigned(blocks));
    __syncthreads();
    // Every block ranks the logits.
    rank_row<true>(t < a.n_expert ? __ldcg(a.logits + t) : 0.0f, a.n_expert, a.k_used, chosen, chosen_w, a.normalize, a.scale, keys, red);
    __syncthreads();
    if (blockIdx.x == 0 && t < a.k_used) a.ids[t] = chosen[t], a.weights[t] = chosen_w[t];
  } else {
    if (t == 0) chosen[0] = 0, chosen_w[0] = 1.0f;
    __syncthreads();
  }

  // Stage 2: the gate/up rows, (pair, two-row group) items dealt round the blocks so that each
  // SM has as many.
  {
    constexpr int kPart = kFfnRowsPerWarp / 2;
    const GB *gate = static_cast<const GB *>(a.gate), *up = static_cast<const GB *>(a.up);
    const int64_t nb = k / (32 * QBlock<GB>::kSubs), groups = (m + kPart - 1) / kPart, items = a.k_used * groups;
    for (int64_t item = warp * blocks + blockIdx.x; item < items; item += blocks * kFfnWarps) {
      const int64_t pair = item / groups, o0 = (item - pair * groups) * kPart;
      const int live = int(m - o0 < kPart ? m - o0 : kPart);
      const GB *rows[kFfnRowsPerWarp];
      expert_rows<GB, kFfnRowsPerWarp, kPart, true>(rows, gate, up, chosen[pair], m, o0, live, nb);
      float acc[kFfnRowsPerWarp];
      rows_dot_acts<GB, kFfnRowsPerWarp, 1, kFfnUnroll, kPart, true>(rows, live, xg, ns, 1, acc);
      float v;
      int r, j;
      if (lane_result<kFfnRowsPerWarp, 1, kPart, true>(acc, a.act, v, r, j) && r < live) a.y[pair * m + o0 + r] = v;
    }
  }
  __syncthreads();  // the block's y is written
  if (t == 0) grid_arrive(a.counters);

  // Stage 3, while the other blocks finish stage 2: the warp's first down rows (of each choice)
  // copied into shared memory, at their addresses' offsets from 16 bytes (the types' loads).
  const DB *down = static_cast<const DB *>(a.down);
  const int64_t nbd = m / (32 * QBlock<DB>::kSubs), ns_d = m / 32, total = a.k_used * ns_d;
  const int64_t first = warp * blocks + blockIdx.x;
  if (a.stage_down && first < k) {
    uint8_t *mine = smem + a.stage_at + size_t(warp) * a.k_used * a.slot;
    for (int p = 0; p < a.k_used; ++p) {
      const int lead = copy_run_async(mine + p * a.slot, down + (int64_t(chosen[p]) * k + first) * nbd, int(nbd * sizeof(DB)), lane);
      if (lane == 0) rows_of[warp][p] = reinterpret_cast<const DB *>(mine + p * a.slot + lead);
    }
  }
  if (t == 0) {
    grid_wait(a.counters, kBarriers * unsigned(blocks));
    if (atomicAdd(a.counters + 1, 1u) == unsigned(blocks) - 1) atomicExch(a.counters, 0u), atomicExch(a.counters + 1, 0u);  // the last past it
  }
  __syncthreads();
  quantize_to_shared<2, true>(a.y, nullptr, total, xd);
  cp_async_wait_all();
  __syncthreads();
  for (int64_t o = first; o < k; o += blocks * kFfnWarps) {
    if (o != first || !a.stage_down) {
      __syncwarp();
      if (lane < a.k_used) rows_of[warp][lane] = down + (int64_t(chosen[lane]) * k + o) * nbd;
      __syncwarp();
    }
    float acc;
    if constexpr (kSubPairs<DB>) acc = expert_row_sum_pairs<DB>(rows_of[warp], chosen_w, xd, 0, nbd, ns_d, total, lane);
    else acc = expert_row_sum<DB>(rows_of[warp], chosen_w, xd, 0, nbd, ns_d, total, lane);
    if (o + blocks * kFfnWarps >= k) release_dependents();  // the warp's last row is read; every block is past the barriers
    acc = warp_sum(acc);
    if (lane == 0) a.out[o] = a.add ? __ldcg(a.add + o) + acc : acc;  // kWithO: add is x, which another block wrote
  }
}

// The (gate/up, down) block types the one-launch FFN is built for: llama.cpp's mixes for the
// int8 types (Q4_K_M and Q5_K_M put some layers' down weights in Q6_K, Q3_K_M in Q5_K or
// Q4_K; where the model's width is no multiple of 256, as Qwen2-0.5B's 896, Q4_K_M's gate and
// up fall back to Q5_0 beside K-quant down rows); another pair runs as separate launches.
template <class G, class D>
constexpr bool kFfnPair = std::is_same_v<G, D> || (std::is_same_v<G, minfer_block_q4_k> && std::is_same_v<D, minfer_block_q6_k>) ||
                          (std::is_same_v<G, minfer_block_q5_k> && std::is_same_v<D, minfer_block_q6_k>) ||
                          (std::is_same_v<G, minfer_block_q3_k> && (std::is_same_v<D, minfer_block_q5_k> || std::is_same_v<D, minfer_block_q4_k>)) ||
                          (std::is_same_v<G, minfer_block_q5_0> && (std::is_same_v<D, minfer_block_q4_k> || std::is_same_v<D, minfer_block_q6_k>));

// Calls f(G{}, D{}) for a supported pair; false for any other.
template <class F>
bool visit_ffn_pair(int32_t gate_dtype, int32_t down_dtype, F &&f) {
  bool found = false;
  visit_int8_block(gate_dtype, [&](auto g) {
    using G = decltype(g);  // named here: in the inner lambda, decltype of the captured g is not G for nvcc
    visit_int8_block(down_dtype, [&](auto d) {
      if constexpr (kFfnPair<G, decltype(d)>) {
        found = true;
        f(G{}, d);
      }
    });
  });
  return found;
}

struct FfnSmem {
  size_t xg_at, xd_at, stage_at, slot, without_stage, with_stage;
};
// ko > 0: the attention output's activations (ko / 32 blocks) share xd's region (dead until stage 3).
template <class G, class D>
FfnSmem ffn_smem(int64_t k, int64_t m, int64_t k_used, int64_t ko) {
  const auto up16 = [](size_t b) { return (b + 15) / 16 * 16; };
  FfnSmem s{};
  s.xg_at = up16(size_t(k) * sizeof(float));
  s.xd_at = up16(s.xg_at + size_t(k / 32) * sizeof(minfer_cuda_q8_act));
  s.stage_at = up16(s.xd_at + size_t(std::max(k_used * (m / 32), ko / 32)) * sizeof(minfer_cuda_q8_act));
  s.slot = size_t(run_slot_bytes(int64_t(m / (32 * QBlock<D>::kSubs)) * int64_t(sizeof(D))));
  s.without_stage = s.stage_at;
  s.with_stage = s.stage_at + size_t(kFfnWarps) * size_t(k_used) * s.slot;
  return s;
}

int ffn_smem_optin() {
  int device = 0, optin = 48 * 1024;
  if (cudaGetDevice(&device) == cudaSuccess) cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  return optin - 10 * 1024;  // the kernel's static shared memory (keys, rows_of, ...: 8.4 KiB) besides
}

// The limits both forms share: the norm's row on 256 threads, whole blocks of both types (and,
// ko > 0, of the output projection's rows in the gate's type), the shared memory without the
// staged down rows.
bool ffn_fits(int32_t gate_dtype, int32_t down_dtype, int64_t k, int64_t m, int64_t k_used, int64_t ko) {
  if (k % 4 || k / 4 > int64_t(kRmsCached) * kRouterThreads || k_used < 1 || k_used > kSumMaxChoices || ko < 0) return false;
  bool ok = false;
  visit_ffn_pair(gate_dtype, down_dtype, [&](auto g, auto d) {
    using G = decltype(g);
    using D = decltype(d);
    ok = k % (32 * QBlock<G>::kSubs) == 0 && m % (32 * QBlock<D>::kSubs) == 0 && ko % (32 * QBlock<G>::kSubs) == 0 &&
         ffn_smem<G, D>(k, m, k_used, ko).without_stage <= size_t(ffn_smem_optin());
  });
  return ok;
}

// The output projection's arguments, where given: its weights on 16 bytes, x = its output.
bool attn_out_args(const minfer_cuda_ffn_attn_out &o, int32_t gate_dtype, const float *x, FfnArgs &a) {
  if (!o.w) return true;
  if (!o.x || !o.add || o.out != x || !on16(gate_dtype, o.w, nullptr)) return false;
  a.o_w = o.w, a.o_x = o.x, a.o_add = o.add, a.o_out = o.out, a.ko = o.k;
  return true;
}

// Fills in the shared-memory layout and launches either form (with the output projection where
// a.o_w): a block an SM, the down rows staged where the shared memory holds them.
template <bool kRouted>
cudaError_t launch_ffn(minfer_cuda_launch_cfg *cfg, FfnArgs a, int32_t gate_dtype, int32_t down_dtype, int32_t sm_count) {
  cudaError_t e = cudaSuccess;
  visit_ffn_pair(gate_dtype, down_dtype, [&](auto g, auto d) {
    using G = decltype(g);
    using D = decltype(d);
    const FfnSmem s = ffn_smem<G, D>(a.k, a.m, a.k_used, a.o_w ? a.ko : 0);
    const bool stage = s.with_stage <= size_t(ffn_smem_optin());
    const size_t smem = stage ? s.with_stage : s.without_stage;
    const auto kernel = a.o_w ? ffn_decode_kernel<G, D, kRouted, true> : ffn_decode_kernel<G, D, kRouted, false>;
    if (smem > 48 * 1024) e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    int per_sm = 0;
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kFfnThreads, smem);
    if (e == cudaSuccess && per_sm < 1) e = cudaErrorNotSupported;
    if (e != cudaSuccess) return;
    a.stage_down = stage;
    a.xg_at = s.xg_at, a.xd_at = s.xd_at, a.stage_at = s.stage_at, a.slot = s.slot;
    const int64_t blocks = std::min<int64_t>(int64_t(sm_count > 0 ? sm_count : 132), cfg->max_blocks);
    launch_cooperative(cfg, kernel, unsigned(blocks), kFfnThreads, smem, a);
  });
  if (e != cudaSuccess) return e;
  if (a.o_w)
    return launched(cfg,
                    kRouted ? "ffn_decode_kernel (output projection and residual add, RMS norm, router, top-k, gate/up experts, down experts "
                              "and their sum)"
                            : "ffn_decode_kernel (output projection and residual add, RMS norm, gate/up, down)",
                    gate_dtype);
  return launched(cfg,
                  kRouted ? "ffn_decode_kernel (RMS norm, router, top-k, gate/up experts, down experts and their sum)"
                          : "ffn_decode_kernel (RMS norm, gate/up, down)",
                  gate_dtype);
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" int32_t minfer_cuda_moe_ffn_decode_supported(int32_t router_dtype, int32_t gate_dtype, int32_t down_dtype, int64_t k, int64_t m,
                                                       int64_t n_expert, int64_t k_used, int64_t ko) {
  return router_dtype == MINFER_DTYPE_F32 && n_expert <= kFfnThreads && k_used <= n_expert &&
         ffn_fits(gate_dtype, down_dtype, k, m, k_used, ko);
}

extern "C" cudaError_t minfer_cuda_moe_ffn_decode(minfer_cuda_launch_cfg *cfg, const minfer_cuda_moe_ffn *f, int32_t sm_count) {
  const minfer_cuda_moe_router &r = f->router;
  const int64_t ko = f->attn_out.w ? f->attn_out.k : 0;
  if (!minfer_cuda_moe_ffn_decode_supported(r.w_dtype, f->gate_dtype, f->down_dtype, r.k, f->m, r.n_expert, r.k_used, ko) || !f->counters ||
      !rms_row_fits(r.k, kRouterThreads, r.x, r.norm_w, r.h) || reinterpret_cast<uintptr_t>(r.w) % 16 != 0 ||
      !on16(f->gate_dtype, f->gate, f->up) || !on16(f->down_dtype, f->down, nullptr))
    return cudaErrorInvalidValue;
  FfnArgs a{};
  a.x = r.x, a.norm_w = r.norm_w, a.router = static_cast<const float *>(r.w), a.eps = r.eps, a.scale = r.scale;
  a.h = r.h, a.logits = r.logits, a.weights = r.weights, a.ids = r.ids;
  a.n_expert = int32_t(r.n_expert), a.k_used = int32_t(r.k_used), a.normalize = r.normalize, a.act = f->act;
  a.gate = f->gate, a.up = f->up, a.down = f->down, a.y = f->y, a.out = f->out, a.add = f->add;
  a.k = r.k, a.m = f->m;
  a.counters = f->counters;
  if (!attn_out_args(f->attn_out, f->gate_dtype, r.x, a)) return cudaErrorInvalidValue;
  return launch_ffn<true>(cfg, a, f->gate_dtype, f->down_dtype, sm_count);
}

extern "C" int32_t minfer_cuda_ffn_decode_supported(int32_t gate_dtype, int32_t down_dtype, int64_t k, int64_t m, int64_t ko) {
  return ffn_fits(gate_dtype, down_dtype, k, m, 1, ko);
}

extern "C" cudaError_t minfer_cuda_ffn_decode(minfer_cuda_launch_cfg *cfg, const minfer_cuda_ffn *f, int32_t sm_count) {
  const int64_t ko = f->attn_out.w ? f->attn_out.k : 0;
  if (!minfer_cuda_ffn_decode_supported(f->gate_dtype, f->down_dtype, f->k, f->m, ko) || !f->counters ||
      !rms_row_fits(f->k, kRouterThreads, f->x, f->norm_w, nullptr) || !on16(f->gate_dtype, f->gate, f->up) ||
      !on16(f->down_dtype, f->down, nullptr))
    return cudaErrorInvalidValue;
  FfnArgs a{};
  a.x = f->x, a.norm_w = f->norm_w, a.eps = f->eps;
  a.k_used = 1, a.act = f->act;
  a.gate = f->gate, a.up = f->up, a.down = f->down, a.y = f->y, a.out = f->out, a.add = f->add;
  a.k = f->k, a.m = f->m;
  a.counters = f->counters;
  if (!attn_out_args(f->attn_out, f->gate_dtype, f->x, a)) return cudaErrorInvalidValue;
  return launch_ffn<false>(cfg, a, f->gate_dtype, f->down_dtype, sm_count);
}
