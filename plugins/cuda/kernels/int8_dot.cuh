// plugins/cuda/kernels/int8_dot.cuh — the pieces the dp4a matmuls share (mmvq.cu for a few
// tokens, gemv.cu for one): activations quantized to 8 bits per 32 values, and one weight
// sub-block (qblock.cuh) dotted with one such activation block.
#pragma once

#include <cuda_fp16.h>

#include "q8_act.cuh"
#include "qblock.cuh"

namespace minfer::cuda {

// Four consecutive lanes quantize one block of 32 values, eight each (v0, v1 in order): the
// lane's two words of int8, and the block's scale d and scaled sum s (the same in all four).
// Every lane of the warp must call it (the shuffles). x ~ d * q with q = round(x * (1 / d)),
// the CPU backend's rounding (qdot.cpp), so both backends quantize a vector alike.
struct Q8Part {
  int32_t w0, w1;
  float d, s;
};
__device__ __forceinline__ Q8Part quantize8(float4 v0, float4 v1) {
  float amax = fmaxf(fmaxf(fmaxf(fabsf(v0.x), fabsf(v0.y)), fmaxf(fabsf(v0.z), fabsf(v0.w))),
                     fmaxf(fmaxf(fabsf(v1.x), fabsf(v1.y)), fmaxf(fabsf(v1.z), fabsf(v1.w))));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
  const float vals[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
  int q[8], sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) sum += q[i] = __float2int_rn(vals[i] * id);
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  return {(q[0] & 0xff) | (q[1] & 0xff) << 8 | (q[2] & 0xff) << 16 | int(uint32_t(q[3]) << 24),
          (q[4] & 0xff) | (q[5] & 0xff) << 8 | (q[6] & 0xff) << 16 | int(uint32_t(q[7]) << 24), d, d * float(sum)};
}

// A row x of nb blocks of 32 values quantized into shared memory by the whole block (gemv.cu,
// moe.cu's decode kernel), four lanes per block; the caller syncs before reading xs.
// norm_w (optional): quantize x * norm_w instead of x, and return this thread's part of the
// sum of x^2 — an RMS norm folded into the GEMV: its scale is one number per token, applied
// to the dot products afterwards, so the norm adds no pass of its own.
// kBufs passes' values (x and norm_w) live in as many register sets that take turns: a pass's
// loads go out kBufs - 1 passes ahead into the set the previous pass freed, so a long x (ffn_down's
// 18944 values: five passes at 16 warps) waits for memory about once. With one set handed on by
// copying (v = next; next = load), the copy waited for the load and each pass took a full trip.
// kBufs = 1: each pass loads and then uses its values (an x of one pass, or registers short).
// kFromL2: x read past L1 (__ldcg), for values other blocks of the same launch wrote.
template <int kBufs = 2, bool kFromL2 = false>
__device__ __forceinline__ float quantize_to_shared(const float *x, const float *norm_w, int64_t nb, minfer_cuda_q8_act *xs) {
  const int sub = threadIdx.x & 3;  // 4 lanes per block of 32 values
  const int64_t step = blockDim.x >> 2, mine = threadIdx.x >> 2;
  struct Pass {
    float4 v0, v1, w0, w1;
  };
  // This thread's 8 values of block b and their norm weights (nothing past the end).
  const auto load = [&](int64_t b, Pass &p) {
    if (b >= nb) return;
    const float4 *v = reinterpret_cast<const float4 *>(x + b * 32 + sub * 8);
    if constexpr (kFromL2) p.v0 = __ldcg(v), p.v1 = __ldcg(v + 1);
    else p.v0 = v[0], p.v1 = v[1];
    if (!norm_w) return;
    p.w0 = reinterpret_cast<const float4 *>(norm_w + b * 32 + sub * 8)[0];
    p.w1 = reinterpret_cast<const float4 *>(norm_w + b * 32 + sub * 8)[1];
  };
  float ss = 0;
  // Whole warps go round together (the shuffles need every lane). A dead lane's block is past
  // the end for all four of its lanes, so whatever its registers hold stays among them.
  const auto use = [&](int64_t b, const Pass &p) {
    const bool live = b < nb;
    float4 v0 = p.v0, v1 = p.v1;
    if (live && norm_w) {
      ss += v0.x * v0.x + v0.y * v0.y + v0.z * v0.z + v0.w * v0.w + v1.x * v1.x + v1.y * v1.y + v1.z * v1.z + v1.w * v1.w;
      v0 = make_float4(v0.x * p.w0.x, v0.y * p.w0.y, v0.z * p.w0.z, v0.w * p.w0.w);
      v1 = make_float4(v1.x * p.w1.x, v1.y * p.w1.y, v1.z * p.w1.z, v1.w * p.w1.w);
    }
    const Q8Part r = quantize8(v0, v1);
    if (!live) return;
    xs[b].qs[2 * sub] = r.w0;
    xs[b].qs[2 * sub + 1] = r.w1;
    if (sub == 0) xs[b].d = r.d, xs[b].s = r.s;
  };
  Pass buf[kBufs] = {};
#pragma unroll
  for (int i = 0; i < kBufs - 1; ++i) load(mine + i * step, buf[i]);
  for (int64_t b0 = 0; b0 < nb; b0 += kBufs * step) {
#pragma unroll
    for (int i = 0; i < kBufs; ++i) {  // unrolled: each set stays in its own registers
      const int64_t p0 = b0 + i * step;
      if (p0 >= nb) break;
      load(p0 + (kBufs - 1) * step + mine, buf[(i + kBufs - 1) % kBufs]);
      use(p0 + mine, buf[i]);
    }
  }
  return ss;
}

// One weight sub-block (32 values) times one activation block, for sub-blocks with two scales
// and/or a minimum as the flags say (a SubBlock of a simpler type has d[1] == d[0] and m == 0,
// so the general form serves it too).
// kHalfOffsets (Q2_K): an offset per 16 values, times each half's own activation sum.
template <bool kTwoScales, bool kOffset, bool kHalfOffsets = false>
__device__ __forceinline__ float sub_dot_as(const SubBlock &w, const minfer_cuda_q8_act &a) {
  int lo = 0, hi = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) lo = __dp4a(int(w.q[i]), a.qs[i], lo);
#pragma unroll
  for (int i = 4; i < 8; ++i) hi = __dp4a(int(w.q[i]), a.qs[i], hi);
  float v = (kTwoScales ? w.d[0] * float(lo) + w.d[1] * float(hi) : w.d[0] * float(lo + hi));
  if (kHalfOffsets) {
    int sum_lo = 0, sum_hi = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) sum_lo = __dp4a(0x01010101, a.qs[i], sum_lo), sum_hi = __dp4a(0x01010101, a.qs[i + 4], sum_hi);
    v = fmaf(w.m, float(sum_lo), fmaf(w.m2, float(sum_hi), v));
  }
  v *= a.d;
  if (kOffset) v = fmaf(w.m, a.s, v);
  return v;
}
template <class Block>
__device__ __forceinline__ float sub_dot(const SubBlock &w, const minfer_cuda_q8_act &a) {
  return sub_dot_as<QBlock<Block>::kTwoScales, QBlock<Block>::kOffset, kTwoOffsets<Block>>(w, a);
}
// A sub-block as the one-token GEMVs unpack it (GemvUnpack: its bias still in) times activations.
template <class Block>
__device__ __forceinline__ float gemv_dot(const SubBlock &w, const minfer_cuda_q8_act &a) {
  const float v = sub_dot<Block>(w, a);
  if constexpr (GemvUnpack<Block>::kBias != 0) return fmaf(-GemvUnpack<Block>::kBias * w.d[0], a.s, v);
  return v;
}

// One activation block from shared memory as five 8-byte loads: the 40-byte blocks of
// consecutive lanes then fall in distinct banks (4-byte loads meet two to a bank).
__device__ __forceinline__ minfer_cuda_q8_act load_act(const minfer_cuda_q8_act *p) {
  const int2 *v = reinterpret_cast<const int2 *>(p);
  minfer_cuda_q8_act a;
  const int2 ds = v[0];
  a.d = __int_as_float(ds.x), a.s = __int_as_float(ds.y);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int2 q = v[1 + i];
    a.qs[2 * i] = q.x, a.qs[2 * i + 1] = q.y;
  }
  return a;
}

// A warp's kRows weight rows (row[r]; only r % kPartRows < live are read: a gated group's
// gate rows then its up rows) dotted with nt <= kT tokens' activations in shared memory (xs,
// token-major, ns blocks a token): each lane takes whole sub-blocks, kUnroll in flight per row,
// and every activation block read serves all kRows rows. acc[r * kT + j]: the lane's part of
// row r times token j (warp_sums totals them). kWide: the rows start on 16 bytes (unpack_sub).
template <class Block, int kRows, int kT, int kUnroll, int kPartRows, bool kWide = false>
__device__ __forceinline__ void rows_dot_acts(const Block *(&row)[kRows], int live, const minfer_cuda_q8_act *xs, int64_t ns, int nt,
                                              float (&acc)[kRows * kT]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < kRows * kT; ++i) acc[i] = 0;
  for (int64_t sb0 = lane; sb0 < ns; sb0 += 32 * kUnroll) {
    SubBlock s[kUnroll][kRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        if (r % kPartRows < live && sb0 + 32 * u < ns) unpack_sub<Block, kWide>(row[r], sb0 + 32 * u, s[u][r]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (sb0 + 32 * u >= ns) break;
#pragma unroll
      for (int j = 0; j < kT; ++j) {
        if (j >= nt) break;
        const minfer_cuda_q8_act a = load_act(&xs[j * ns + sb0 + 32 * u]);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          if (r % kPartRows < live) acc[r * kT + j] += sub_dot<Block>(s[u][r], a);
      }
    }
  }
}

}  // namespace minfer::cuda
