// plugins/cuda/kernels/flash_attention.cu — fused causal GQA attention (flash-style, split-K).
//
// A block takes 32 query rows of one KV head — the (token, query head) pairs that share that
// head's K and V, token-major — and walks the keys in tiles of 32 staged in shared memory as
// f32, with a running max and sum per row (online softmax), so no score matrix is stored
// and any context length fits. Warp w owns rows 8w..8w+7; lane j scores key j of the tile
// for its 8 rows, and for P·V lane j owns dims j, j+32, ...
//
// Split-K: when (KV heads x row tiles) would not fill the GPU — decode above all — the keys
// are cut into `splits` chunks; each block writes its rows' unnormalized output with their
// max and sum, and a second kernel merges the chunks. The split count depends only on the
// token count and a sequence's most positions, never on where the sequences are, so a
// captured graph stays valid.
//
// Pages (kv_pages.cuh): every key is read through its sequence's page table. A row tile may
// hold tokens of several sequences (a step mixes them; a sequence's tokens are consecutive):
// the block walks each sequence's keys in turn, the rows of the others masked, so each row
// sees only its own sequence.
#include <cuda_fp16.h>

#include <type_traits>

#include "async_copy.cuh"
#include "grid.cuh"
#include "kv_pages.cuh"
#include "minfer/dtype.h"
#include "mma_f16.cuh"
#include "reduce.cuh"
#include "rope.cuh"

namespace minfer::cuda {
namespace {

constexpr int kWarps = 4, kRowsPerWarp = 8, kRows = kWarps * kRowsPerWarp, kKeys = 32;
constexpr int kThreads = kWarps * 32;
constexpr int64_t kMinChunk = 32;  // keys per split at least: one tile

template <int HD>
constexpr int k_stride() { return HD + 4; }  // K rows padded: lane j's float4 reads fall in distinct banks

template <int HD>
constexpr size_t smem_bytes() { return size_t(kRows * HD + kKeys * k_stride<HD>() + kKeys * HD) * sizeof(float); }

__device__ __forceinline__ float2 load2(const float *p) { return *reinterpret_cast<const float2 *>(p); }
__device__ __forceinline__ float2 load2(const __half *p) { return __half22float2(*reinterpret_cast<const __half2 *>(p)); }
__device__ __forceinline__ float ldf(const float *p) { return *p; }
__device__ __forceinline__ float ldf(const __half *p) { return __half2float(*p); }
__device__ __forceinline__ void st(float *p, float v) { *p = v; }
__device__ __forceinline__ void st(__half *p, float v) { *p = __float2half_rn(v); }

// A prefill block's work item: key split z of row tile `tile` of KV head kvh (splits fastest,
// so the splits of one row tile run side by side).
struct PrefillItem {
  int z, kvh;
  int64_t tile;
  __device__ PrefillItem(int64_t item, int splits, int64_t row_tiles)
      : z(int(item % splits)), kvh(int(item / (int64_t(splits) * row_tiles))), tile((item / splits) % row_tiles) {}
};

template <class T, int HD>
__global__ void __launch_bounds__(kThreads) flash_attention_kernel(const float *q, const T *kc, const T *vc, float *out, float *partials,
                                                                   int64_t tokens, int n_head, int n_kv, minfer_cuda_kv_pages kv,
                                                                   minfer_cuda_attn_scores scores, int64_t row_tiles, int splits, int64_t chunk) {
  wait_for_inputs();
  constexpr int KS = k_stride<HD>(), D = HD / 32;  // dims per lane in P·V
  extern __shared__ float4 smem4[];
  float *qs = reinterpret_cast<float *>(smem4), *ks = qs + kRows * HD, *vs = ks + kKeys * KS;
  const int group = n_head / n_kv, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t rows = tokens * group, kvd = int64_t(n_kv) * HD;
  const int64_t items = int64_t(n_kv) * row_tiles * splits;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const PrefillItem it(item, splits, row_tiles);
    const int z = it.z, kvh = it.kvh;
    const int64_t r0 = it.tile * kRows;
    __syncthreads();  // the previous item's last tile is consumed before qs/ks/vs are rewritten
    for (int i = threadIdx.x; i < kRows * HD / 4; i += kThreads) {
      const int r = i / (HD / 4), d4 = i % (HD / 4);
      const int64_t row = r0 + r;
      float4 v = make_float4(0, 0, 0, 0);
      if (row < rows) {
        const int64_t t = row / group, h = int64_t(kvh) * group + row % group;
        v = reinterpret_cast<const float4 *>(q + (t * n_head + h) * HD)[d4];
        v.x *= scores.scale, v.y *= scores.scale, v.z *= scores.scale, v.w *= scores.scale;
      }
      reinterpret_cast<float4 *>(qs)[i] = v;
    }
    const int64_t last_row = (r0 + kRows < rows ? r0 + kRows : rows) - 1;
    float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][D];
    for (int r = 0; r < kRowsPerWarp; ++r) {
      m[r] = -INFINITY, l[r] = 0;
      for (int i = 0; i < D; ++i) acc[r][i] = 0;
    }
    // The tile's sequences in turn: tokens t0..t1 of one slot.
    for (int64_t t0 = r0 / group; t0 <= last_row / group;) {
      const int32_t slot = kv.slots[t0];
      int64_t t1 = t0;
      while (t1 < last_row / group && kv.slots[t1 + 1] == slot) ++t1;
      // The keys each of this warp's rows may see: lo..limit (causal, within its window);
      // limit -1 for rows of other sequences.
      int64_t limit[kRowsPerWarp], lo[kRowsPerWarp];
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const int64_t row = r0 + warp * kRowsPerWarp + r, t = row / group;
        limit[r] = row <= last_row && t >= t0 && t <= t1 ? kv.positions[t] : -1;
        lo[r] = limit[r] >= 0 ? first_key(scores, limit[r]) : 0;
      }
      // This split's keys, less those before the first token's window (no row's).
      const int64_t from = first_key(scores, kv.positions[t0]), end_all = int64_t(kv.positions[t1]) + 1;
      const int64_t begin = int64_t(z) * chunk > from ? int64_t(z) * chunk : from;
      const int64_t end = int64_t(z) * chunk + chunk < end_all ? int64_t(z) * chunk + chunk : end_all;
      for (int64_t k0 = begin; k0 < end; k0 += kKeys) {
        __syncthreads();  // the previous tile is consumed (and qs written, the first time)
        for (int i = threadIdx.x; i < kKeys * HD / 2; i += kThreads) {
          const int j = i / (HD / 2), d = 2 * (i % (HD / 2));
          const int64_t pos = k0 + j;
          float2 kk = make_float2(0, 0), vv = make_float2(0, 0);
          if (pos < end) {
            const int64_t at = kv_row(kv, slot, pos) * kvd + int64_t(kvh) * HD + d;
            kk = load2(kc + at);
            vv = load2(vc + at);
          }
          ks[j * KS + d] = kk.x, ks[j * KS + d + 1] = kk.y;
          vs[j * HD + d] = vv.x, vs[j * HD + d + 1] = vv.y;
        }
        __syncthreads();
        // Two partial sums (alternate groups of 4 dims): one running sum over 64 groups of a
        // 256-value head strayed 1.6e-5 of a weighted value from exact (N(0, 2) data).
        float s[kRowsPerWarp], s2[kRowsPerWarp];
        for (int r = 0; r < kRowsPerWarp; ++r) s[r] = 0, s2[r] = 0;
#pragma unroll 2
        for (int d = 0; d < HD; d += 8) {
          const float4 ka = *reinterpret_cast<const float4 *>(ks + lane * KS + d), kb = *reinterpret_cast<const float4 *>(ks + lane * KS + d + 4);
          for (int r = 0; r < kRowsPerWarp; ++r) {
            const float4 qa = *reinterpret_cast<const float4 *>(qs + (warp * kRowsPerWarp + r) * HD + d);
            const float4 qb = *reinterpret_cast<const float4 *>(qs + (warp * kRowsPerWarp + r) * HD + d + 4);
            s[r] += qa.x * ka.x + qa.y * ka.y + qa.z * ka.z + qa.w * ka.w;
            s2[r] += qb.x * kb.x + qb.y * kb.y + qb.z * kb.z + qb.w * kb.w;
          }
        }
        for (int r = 0; r < kRowsPerWarp; ++r) s[r] += s2[r];
        const int64_t pos = k0 + lane;
        for (int r = 0; r < kRowsPerWarp; ++r) {
          s[r] = cap_score(scores, s[r]);
          if (pos > limit[r] || pos < lo[r] || pos >= end) s[r] = -INFINITY;
          const float m_new = fmaxf(m[r], warp_max(s[r]));
          // A row with no visible key yet keeps m = -inf: its weights are 0, not exp(nan).
          const float p = m_new == -INFINITY ? 0.0f : expf(s[r] - m_new);
          const float corr = m_new == -INFINITY ? 1.0f : expf(m[r] - m_new);
          l[r] = l[r] * corr + warp_sum(p);
          m[r] = m_new;
          for (int i = 0; i < D; ++i) acc[r][i] *= corr;
          s[r] = p;
        }
        for (int j = 0; j < kKeys; ++j) {
          float v[D];
          for (int i = 0; i < D; ++i) v[i] = vs[j * HD + lane + 32 * i];
          for (int r = 0; r < kRowsPerWarp; ++r) {
            const float pj = __shfl_sync(0xffffffffu, s[r], j);
            for (int i = 0; i < D; ++i) acc[r][i] += pj * v[i];
          }
        }
      }
      t0 = t1 + 1;
    }
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t row = r0 + warp * kRowsPerWarp + r;
      if (row >= rows) continue;
      if (splits == 1) {
        const int64_t t = row / group, h = int64_t(kvh) * group + row % group;
        const float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
        for (int i = 0; i < D; ++i) out[(t * n_head + h) * HD + lane + 32 * i] = acc[r][i] * inv;
      } else {
        float *p = partials + ((int64_t(z) * n_kv + kvh) * rows + row) * (HD + 2);
        for (int i = 0; i < D; ++i) p[lane + 32 * i] = acc[r][i];
        if (lane == 0) p[HD] = m[r], p[HD + 1] = l[r];
      }
    }
  }
}

// Prefill with an f16 cache, on tensor cores (mma.m16n8k16, f16 in, f32 accumulate): the same tiling of rows (token, query head)
// per KV head and online softmax as above, with 16 rows per warp, 64 per block, and 64-key
// tiles. A warp keeps its rows' Q as A fragments; S = Q K^T lands in accumulators whose
// layout is P's A-fragment layout, so P·V reuses them without shared memory. K is staged
// row-major, V transposed, both with rows padded by 8 halves so the fragment loads of the
// 8 row groups fall in distinct banks. Q enters as two f16 parts (high, and the rest), so
// the scores are as exact as in f32 — large scores would otherwise carry f16's 5e-4
// relative error into the weights; P is rounded to f16 (the caches already are).
constexpr int kTcWarps = 4, kTcRows = 16 * kTcWarps, kTcKeys = 64, kTcThreads = kTcWarps * 32;

template <int HD>
constexpr size_t tc_smem_bytes() { return size_t(kTcKeys * (HD + 8) + HD * (kTcKeys + 8)) * sizeof(__half); }

template <int HD>
__global__ void __launch_bounds__(kTcThreads) flash_attention_tc_kernel(const float *q, const __half *kc, const __half *vc, float *out,
                                                                        float *partials, int64_t tokens, int n_head, int n_kv,
                                                                        minfer_cuda_kv_pages kv, minfer_cuda_attn_scores scores, int64_t row_tiles,
                                                                        int splits, int64_t chunk) {
  wait_for_inputs();
  constexpr int KP = HD + 8, VP = kTcKeys + 8, NB = HD / 8;  // padded rows; n-blocks of the output
  extern __shared__ uint4 tc_smem[];
  __half *ks = reinterpret_cast<__half *>(tc_smem), *vt = ks + kTcKeys * KP;
  const int group = n_head / n_kv, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tg = lane % 4;
  const int64_t rows = tokens * group, kvd = int64_t(n_kv) * HD;
  const int64_t items = int64_t(n_kv) * row_tiles * splits;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const PrefillItem it(item, splits, row_tiles);
    const int z = it.z, kvh = it.kvh;
    const int64_t r0 = it.tile * kTcRows, wr = r0 + warp * 16;  // this warp's rows: wr + g, wr + g + 8
    uint32_t qa[HD / 16][4], qb[HD / 16][4];  // Q = qa + qb: f16 high part and the f16 rest
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = wr + g + 8 * h;
      const float *qr = row < rows ? q + ((row / group) * n_head + int64_t(kvh) * group + row % group) * HD : nullptr;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float2 v = make_float2(0, 0);
          if (qr) v = *reinterpret_cast<const float2 *>(qr + kk * 16 + 2 * tg + 8 * c);
          const __half2 hi = __floats2half2_rn(v.x * scores.scale, v.y * scores.scale);
          const float2 back = __half22float2(hi);
          qa[kk][h + 2 * c] = *reinterpret_cast<const uint32_t *>(&hi);
          qb[kk][h + 2 * c] = pack_half2(v.x * scores.scale - back.x, v.y * scores.scale - back.y);
        }
    }
    const int64_t last_row = (r0 + kTcRows < rows ? r0 + kTcRows : rows) - 1;
    float o[NB][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};  // l: this thread's part of the row sums
    // The tile's sequences in turn: tokens t0..t1 of one slot.
    for (int64_t t0 = r0 / group; t0 <= last_row / group;) {
      const int32_t slot = kv.slots[t0];
      int64_t t1 = t0;
      while (t1 < last_row / group && kv.slots[t1 + 1] == slot) ++t1;
      int64_t limit[2], lo[2];  // the keys each of this thread's rows may see: lo..limit; limit -1 for other sequences'
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = wr + g + 8 * h, t = row / group;
        limit[h] = row <= last_row && t >= t0 && t <= t1 ? kv.positions[t] : -1;
        lo[h] = limit[h] >= 0 ? first_key(scores, limit[h]) : 0;
      }
      // This split's keys, less those before the first token's window (no row's).
      const int64_t from = first_key(scores, kv.positions[t0]), end_all = int64_t(kv.positions[t1]) + 1;
      const int64_t begin = int64_t(z) * chunk > from ? int64_t(z) * chunk : from;
      const int64_t end = int64_t(z) * chunk + chunk < end_all ? int64_t(z) * chunk + chunk : end_all;
      for (int64_t k0 = begin; k0 < end; k0 += kTcKeys) {
        __syncthreads();  // the previous tile is consumed
        // Consecutive threads take consecutive keys of one 8-dim piece: V's transposed stores then
        // go to consecutive halves of one row of vt (with threads on consecutive pieces of a key
        // instead, 16 of them hit one bank, 8 times per piece).
        for (int i = threadIdx.x; i < kTcKeys * HD / 8; i += kTcThreads) {
          const int j = i % kTcKeys, piece = i / kTcKeys;
          const int64_t pos = k0 + j;
          uint4 kk = make_uint4(0, 0, 0, 0), vv = kk;
          if (pos < end) {
            const int64_t at = kv_row(kv, slot, pos) * kvd + int64_t(kvh) * HD + piece * 8;
            kk = *reinterpret_cast<const uint4 *>(kc + at);
            vv = *reinterpret_cast<const uint4 *>(vc + at);
          }
          *reinterpret_cast<uint4 *>(ks + j * KP + piece * 8) = kk;
          const __half *vh = reinterpret_cast<const __half *>(&vv);
#pragma unroll
          for (int e = 0; e < 8; ++e) vt[(piece * 8 + e) * VP + j] = vh[e];
        }
        __syncthreads();
        float sc[kTcKeys / 8][4] = {};
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk)
#pragma unroll
          for (int n = 0; n < kTcKeys / 8; ++n) {
            const __half *kr = ks + (8 * n + g) * KP + kk * 16 + 2 * tg;
            const uint32_t b0 = *reinterpret_cast<const uint32_t *>(kr), b1 = *reinterpret_cast<const uint32_t *>(kr + 8);
            mma_f16(sc[n], qa[kk], b0, b1);
            mma_f16(sc[n], qb[kk], b0, b1);
          }
        float corr[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float mx = m[h];
#pragma unroll
          for (int n = 0; n < kTcKeys / 8; ++n)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const int64_t key = k0 + 8 * n + 2 * tg + c;
              sc[n][2 * h + c] = cap_score(scores, sc[n][2 * h + c]);
              if (key > limit[h] || key < lo[h] || key >= end) sc[n][2 * h + c] = -INFINITY;
              mx = fmaxf(mx, sc[n][2 * h + c]);
            }
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          // A row with no visible key yet keeps m = -inf: its weights are 0, not exp(nan).
          corr[h] = mx == -INFINITY ? 1.0f : expf(m[h] - mx);
          float sum = 0;
#pragma unroll
          for (int n = 0; n < kTcKeys / 8; ++n)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const float p = mx == -INFINITY ? 0.0f : expf(sc[n][2 * h + c] - mx);
              sc[n][2 * h + c] = p;
              sum += p;
            }
          l[h] = l[h] * corr[h] + sum;
          m[h] = mx;
        }
#pragma unroll
        for (int n = 0; n < NB; ++n) o[n][0] *= corr[0], o[n][1] *= corr[0], o[n][2] *= corr[1], o[n][3] *= corr[1];
#pragma unroll
        for (int kk = 0; kk < kTcKeys / 16; ++kk) {
          const uint32_t pa[4] = {pack_half2(sc[2 * kk][0], sc[2 * kk][1]), pack_half2(sc[2 * kk][2], sc[2 * kk][3]),
                                  pack_half2(sc[2 * kk + 1][0], sc[2 * kk + 1][1]), pack_half2(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
          for (int n = 0; n < NB; ++n) {
            const __half *vr = vt + (8 * n + g) * VP + kk * 16 + 2 * tg;
            mma_f16(o[n], pa, *reinterpret_cast<const uint32_t *>(vr), *reinterpret_cast<const uint32_t *>(vr + 8));
          }
        }
      }
      t0 = t1 + 1;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
      const int64_t row = wr + g + 8 * h;
      if (row >= rows) continue;
      if (splits == 1) {
        float *dst = out + ((row / group) * n_head + int64_t(kvh) * group + row % group) * HD;
        const float inv = l[h] > 0 ? 1.0f / l[h] : 0.0f;
#pragma unroll
        for (int n = 0; n < NB; ++n) *reinterpret_cast<float2 *>(dst + 8 * n + 2 * tg) = make_float2(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
      } else {
        float *p = partials + ((int64_t(z) * n_kv + kvh) * rows + row) * (HD + 2);
#pragma unroll
        for (int n = 0; n < NB; ++n) p[8 * n + 2 * tg] = o[n][2 * h], p[8 * n + 2 * tg + 1] = o[n][2 * h + 1];
        if (tg == 0) p[HD] = m[h], p[HD + 1] = l[h];
      }
    }
  }
}

// out = sum_z e^(m_z - M) acc_z / sum_z e^(m_z - M) l_z, M = max_z m_z; one block per row.
__global__ void flash_merge_kernel(const float *partials, float *out, int64_t tokens, int n_head, int n_kv, int hd, int splits) {
  wait_for_inputs();
  const int group = n_head / n_kv;
  const int64_t rows = tokens * group;
  for (int64_t item = blockIdx.x; item < int64_t(n_kv) * rows; item += gridDim.x) {
    const int kvh = int(item / rows);
    const int64_t row = item % rows;
    float mx = -INFINITY;
    for (int z = 0; z < splits; ++z) mx = fmaxf(mx, partials[((int64_t(z) * n_kv + kvh) * rows + row) * (hd + 2) + hd]);
    float denom = 0;
    for (int z = 0; z < splits; ++z) {
      const float *p = partials + ((int64_t(z) * n_kv + kvh) * rows + row) * (hd + 2);
      if (p[hd + 1] > 0) denom += expf(p[hd] - mx) * p[hd + 1];
    }
    const int64_t t = row / group, h = int64_t(kvh) * group + row % group;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
      float num = 0;
      for (int z = 0; z < splits; ++z) {
        const float *p = partials + ((int64_t(z) * n_kv + kvh) * rows + row) * (hd + 2);
        if (p[hd + 1] > 0) num += expf(p[hd] - mx) * p[d];
      }
      out[(t * n_head + h) * hd + d] = denom > 0 ? num / denom : 0.0f;
    }
  }
}

// Decode (one token of each sequence in the step): per token, query heads sharing a KV head (<= 8) are the rows — the whole group per
// block (kRows 8), or one head per block while the caches are short (kRows 1: plan_for) — and
// the block's 8 warps take one 32-key tile each of its chunk (256 keys) — the rows are few, the
// keys many, so a step spreads over many blocks. Every load of a tile is issued before its
// first use: lane j's key row straight into registers, and the tile's V rows copied into the
// warp's shared memory asynchronously (cp.async) while the scores are formed; one memory
// latency per tile instead of one per key. For P·V lane j owns dims D*j..D*j+D-1. With f16
// caches the group form runs on tensor cores instead (decode_walk_mma: its scores and P·V as
// m16n8k16 mmas). The warps' running (max, sum, output) are merged in shared memory.
// Split over chunks, the partials go to global memory (each row's HD sums, then all rows'
// (max, sum) pairs) and the last block of a KV head to finish (an atomic counter per head,
// reset by it) merges them: one launch per step. The plan splits the cache's capacity; chunks
// past a token's position leave at once, so a short sequence in a long context is one block
// a KV head that writes its output itself. The
// blocks whose chunk holds the token's own key (its position) first write it from
// k_new/v_new into the caches (the same values from each of a KV head's blocks) and then read
// it back like any other: no separate KV write. Tokens are items like the KV heads: token t's
// blocks read only its sequence's pages.
constexpr int kDecodeWarps = 8, kDecodeRows = 8, kDecodeThreads = kDecodeWarps * 32;
// Two blocks an SM: at one (184 registers a thread, ~100 KiB of shared memory) a 7B's 64
// sequences x 4 KV heads took two waves of 132 with 8 warps an SM to hide the loads.
constexpr int kDecodeMinBlocks = 2;
// Keys per block at least: four tiles a warp while the caches are short (one query head a
// block), one for a group of heads (16 7B sequences of ~520 keys: 192 blocks; 512 keys gave
// 128 and S_TG 3,337/3,308 against 3,417/3,408 side by side, 1024 gave 64 and 5% less than
// 512; two tiles at one head a block cost tg128 2.7%).
constexpr int64_t kDecodeChunk = 4 * kDecodeWarps * 32, kDecodeGroupChunk = kDecodeWarps * 32;

// Whether a KV head's group of query heads goes on tensor cores (decode_walk_mma): f16
// caches, heads of 64 or 128.
__host__ __device__ constexpr bool group_on_tensor_cores(int hd, int32_t dtype) { return dtype == MINFER_DTYPE_F16 && hd <= 128; }
template <class T, int HD, int kRows>
constexpr bool decode_mma() {
  return kRows == kDecodeRows && group_on_tensor_cores(HD, std::is_same_v<T, __half> ? MINFER_DTYPE_F16 : MINFER_DTYPE_F32);
}

// A V tile's row stride in values: the mma form's rows padded by 16 bytes, so that the 8 rows
// of a transposing ldmatrix fall in different banks.
template <class T, int HD, int kRows>
constexpr int decode_v_stride() { return decode_mma<T, HD, kRows>() ? HD + 8 : HD; }

template <class T, int HD, int kRows>
constexpr size_t decode_smem_bytes() { return size_t(kDecodeWarps) * 32 * decode_v_stride<T, HD, kRows>() * sizeof(T); }  // the warps' V tiles

// A warp's walk over its tiles of 32 keys on tensor cores (m16n8k16, f16 in, f32 sums), for a
// KV head's group of up to 8 query heads: S = Q K^T with the heads as the tile's rows (rows
// 8-15 zero) and 8 keys a column block, then out^T = V^T P^T with the output's dims as rows,
// so S's accumulator fragment (a lane's head g = lane / 4, keys 2 (lane % 4) and + 1) is the
// second mma's B operand as it stands. The k order of the first is free as long as Q and K
// agree (mma_f16.cuh): a lane's four k values of step 2jj + h are dims 32 jj + 8 (lane % 4) +
// 4h ..+3, so it reads each key's row straight from the cache, 16 bytes a 32-dim run, and
// qfrag holds Q in that order (f16 high part and rest: x, y and z, w). V goes through the
// warp's tile in shared memory (rows padded to HD + 8) for the transposing ldmatrix. The
// softmax state is per lane's head g; out^T's fragment holds heads 2 (lane % 4) and + 1, whose
// rescaling factors come from the lanes that own them. Leaves the warp's maxima and sums in
// wm/wl and its unnormalized output in acc (kDecodeRows rows of HD), as the scalar walk does.
template <int HD>
__device__ __forceinline__ void decode_walk_mma(const uint4 *qfrag, const __half *kc, const __half *vc, __half *vt,
                                                const minfer_cuda_kv_pages &kv, int32_t slot, int64_t head_off, int64_t kvd,
                                                const minfer_cuda_attn_scores &scores, int64_t from, int64_t end, int warp, int lane,
                                                float *wm, float *wl, float *acc) {
  constexpr int kJ = HD / 32, kM = HD / 16, VS = HD + 8, kPieces = HD / 8;
  const int g = lane / 4, tg = lane % 4;
  float oT[kM][4];
#pragma unroll
  for (int m = 0; m < kM; ++m) oT[m][0] = oT[m][1] = oT[m][2] = oT[m][3] = 0;
  float m_row = -INFINITY, l_row = 0;
  for (int64_t k0 = from + warp * 32; k0 < end; k0 += kDecodeWarps * 32) {
    const int keys = end - k0 < 32 ? int(end - k0) : 32;
    // V rows on their way into the tile; rows past the keys zeroed (their weights are 0, and
    // 0 times whatever bits were there could be NaN).
#pragma unroll 4
    for (int c = lane; c < 32 * kPieces; c += 32) {
      const int j = c / kPieces, piece = c % kPieces;
      const __half *src = j < keys ? vc + kv_row(kv, slot, k0 + j) * kvd + head_off + piece * 8 : vc;
      cp_async16_zfill(vt + j * VS + piece * 8, src, j < keys ? 16 : 0);
    }
    // K: key 8n + g of the tile, this lane's 16 bytes of each 32-dim run.
    uint4 kr[4][kJ];
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      const int j = 8 * n + g;
      const __half *row = kc + kv_row(kv, slot, k0 + (j < keys ? j : 0)) * kvd + head_off + 8 * tg;
#pragma unroll
      for (int jj = 0; jj < kJ; ++jj) kr[n][jj] = j < keys ? *reinterpret_cast<const uint4 *>(row + 32 * jj) : make_uint4(0, 0, 0, 0);
    }
    float s[4][4] = {};
#pragma unroll
    for (int jj = 0; jj < kJ; ++jj)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint4 qf = qfrag[(2 * jj + h) * 32 + lane];
        const uint32_t hi[4] = {qf.x, 0u, qf.y, 0u}, lo[4] = {qf.z, 0u, qf.w, 0u};
#pragma unroll
        for (int n = 0; n < 4; ++n) {
          const uint32_t b0 = h ? kr[n][jj].z : kr[n][jj].x, b1 = h ? kr[n][jj].w : kr[n][jj].y;
          mma_f16(s[n], hi, b0, b1);
          mma_f16(s[n], lo, b0, b1);
        }
      }
    float mx = m_row;
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        s[n][c] = 8 * n + 2 * tg + c < keys ? cap_score(scores, s[n][c]) : -INFINITY;
        mx = fmaxf(mx, s[n][c]);
      }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float corr = mx == -INFINITY ? 1.0f : expf(m_row - mx);
    float sum = 0;
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float p = mx == -INFINITY ? 0.0f : expf(s[n][c] - mx);
        s[n][c] = p, sum += p;
      }
    l_row = l_row * corr + sum, m_row = mx;
    const float c0 = __shfl_sync(0xffffffffu, corr, 8 * tg), c1 = __shfl_sync(0xffffffffu, corr, 8 * tg + 4);
#pragma unroll
    for (int m = 0; m < kM; ++m) oT[m][0] *= c0, oT[m][1] *= c1, oT[m][2] *= c0, oT[m][3] *= c1;
    cp_async_wait_all();
    __syncwarp();
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const uint32_t b0 = pack_half2(s[2 * kk][0], s[2 * kk][1]), b1 = pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        uint32_t a[4];
        ldmatrix_x4_trans(a, vt + (16 * kk + (lane / 16) * 8 + lane % 8) * VS + 16 * m + ((lane / 8) & 1) * 8);
        mma_f16(oT[m], a, b0, b1);
      }
    }
    __syncwarp();  // the tile is read before the next one lands (or acc overwrites it)
  }
  l_row += __shfl_xor_sync(0xffffffffu, l_row, 1);
  l_row += __shfl_xor_sync(0xffffffffu, l_row, 2);
  if (tg == 0) wm[g] = m_row, wl[g] = l_row;
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    acc[2 * tg * HD + 16 * m + g] = oT[m][0], acc[(2 * tg + 1) * HD + 16 * m + g] = oT[m][1];
    acc[2 * tg * HD + 16 * m + 8 + g] = oT[m][2], acc[(2 * tg + 1) * HD + 16 * m + 8 + g] = oT[m][3];
  }
}

// The 16-byte piece of a cached row as floats: 8 of f16, 4 of f32.
__device__ __forceinline__ void unpack16(const uint4 &u, const __half *, float (&v)[8]) {
  const __half2 *h = reinterpret_cast<const __half2 *>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    v[2 * i] = f.x, v[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void unpack16(const uint4 &u, const float *, float (&v)[8]) {
  v[0] = __uint_as_float(u.x), v[1] = __uint_as_float(u.y), v[2] = __uint_as_float(u.z), v[3] = __uint_as_float(u.w);
}

template <class T, int HD, int kRows>
__global__ void __launch_bounds__(kDecodeThreads, kDecodeMinBlocks) flash_decode_kernel(const float *q, const float *k_new, const float *v_new, T *kc, T *vc,
                                                                      float *out, float *partials, int *counters, int64_t tokens, int n_head,
                                                                      int n_kv, minfer_cuda_kv_pages kv, minfer_cuda_attn_scores scores, int splits, int64_t chunk,
                                                                      const int32_t *rope_pos, minfer_cuda_rope rope) {
  constexpr int D = HD / 32, kPieces = HD * int(sizeof(T)) / 16;  // 16-byte pieces of a row
  __shared__ __align__(16) float qs[kRows][HD];
  __shared__ float wm[kDecodeWarps][kRows], wl[kDecodeWarps][kRows];
  __shared__ int last_block;
  __shared__ float2 rope_cs[HD / 2];  // (cos, sin) of each rotated pair at the item's token's position
  __shared__ float norm_scale[kRows + 1];  // rope.norms: the rows' and the new key's 1 / rms
  __shared__ float merge_den[kRows], row_max[kRows];  // each row's denominator and max over the warps (then the splits)
  constexpr bool kMma = decode_mma<T, HD, kRows>();
  constexpr int VS = decode_v_stride<T, HD, kRows>();
  __shared__ uint4 qfrag[kMma ? HD / 16 * 32 : 1];  // the mma form's Q fragments (decode_walk_mma)
  extern __shared__ uint4 vtiles[];
  const int64_t kvd = int64_t(n_kv) * HD;
  const int group = n_head / n_kv, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  T *vt = reinterpret_cast<T *>(vtiles) + warp * 32 * VS;
  // A warp's running output for the merge goes where its V tile was (kRows x HD floats fit in
  // 32 x HD values of T): the block keeps ~70 KiB of shared memory, not ~100.
  const auto wacc = [&](int w, int r) { return reinterpret_cast<float *>(reinterpret_cast<T *>(vtiles) + w * 32 * VS) + r * HD; };
  const int row_blocks = (group + kRows - 1) / kRows;
  int64_t rope_token = -1;  // the token rope_cs holds
  // Before waiting for the kernel before (it writes q, k_new and v_new; grid.cuh): the first
  // item's position and page table, its RoPE angles, and its keys before the new one on their
  // way into L2. Those are the host's inputs of the step and rows earlier steps wrote (a decode
  // step has one token a sequence), so the chain of dependent loads this kernel starts with
  // overlaps the previous kernel's tail.
  if (blockIdx.x < tokens * n_kv * row_blocks * splits) {
    const int64_t item = blockIdx.x;
    const int z = int(item % splits), kvh = int(item / splits / row_blocks % n_kv);
    const int64_t t = item / splits / row_blocks / n_kv, n_past = kv.positions[t];
    if (rope.n_dims > 0) {
      for (int i = threadIdx.x; i < rope.n_dims / 2; i += kDecodeThreads) rope_cos_sin(rope_pos[t], i, rope, rope_cs[i].x, rope_cs[i].y);
      rope_token = t;
    }
    const int64_t begin = int64_t(z) * chunk, first = first_key(scores, n_past) > begin ? first_key(scores, n_past) : begin;
    const int64_t pos = first + warp * 32 + lane;
    if (pos < n_past && pos < begin + chunk) {
      const int64_t at = kv_row(kv, kv.slots[t], pos) * kvd + int64_t(kvh) * HD;
      for (int b = 0; b < HD * int(sizeof(T)); b += 128) {
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(reinterpret_cast<const char *>(kc + at) + b));
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(reinterpret_cast<const char *>(vc + at) + b));
      }
    }
  }
  wait_for_inputs();
  for (int64_t item = blockIdx.x; item < tokens * n_kv * row_blocks * splits; item += gridDim.x) {
    const int z = int(item % splits), rb = int(item / splits % row_blocks), kvh = int(item / splits / row_blocks % n_kv);
    const int64_t t = item / splits / row_blocks / n_kv;
    const int h0 = kvh * group + rb * kRows, nrows = group - rb * kRows < kRows ? group - rb * kRows : kRows;  // the block's query heads
    const int64_t qh0 = t * n_head + h0;  // their rows of q and out
    const int64_t tally = (t * n_kv + kvh) * row_blocks + rb;  // its counter
    const int64_t n_past = kv.positions[t];  // the token's position: keys 0..n_past
    // The chunks that hold keys of this token (the plan splits the cache's capacity): a chunk
    // past its position takes no part, not even in the count or the merge.
    const int used = n_past / chunk + 1 < splits ? int(n_past / chunk + 1) : splits;
    if (z >= used) {
      if (item + gridDim.x >= tokens * n_kv * row_blocks * splits) release_dependents();
      continue;
    }
    const int32_t slot = kv.slots[t];
    const float *kt = k_new + t * kvd, *vt_new = v_new + t * kvd;
    __syncthreads();  // the previous item's shared state is consumed
    // rope.n_dims > 0: q and the new key arrive unrotated; rotate them here (no RoPE launch).
    // Each pair's angle once per token: its double-precision exp and log are the costly part.
    if (rope.n_dims > 0 && t != rope_token) {
      for (int i = threadIdx.x; i < rope.n_dims / 2; i += kDecodeThreads) rope_cos_sin(rope_pos[t], i, rope, rope_cs[i].x, rope_cs[i].y);
      rope_token = t;
      __syncthreads();
    }
    // rope.norms: q's heads and the new key RMS-normalized before rotating (Qwen3's per-head
    // norms: no norm launches either); a warp a row's sum of squares, row nrows the key's.
    const bool normed = rope.n_dims > 0 && rope.norms.w0;
    if (normed) {
      for (int r = warp; r <= nrows; r += kDecodeWarps) {
        const float *src = r < nrows ? q + (qh0 + r) * HD : kt + int64_t(kvh) * HD;
        float ss = 0;
        for (int d = lane; d < HD; d += 32) ss += src[d] * src[d];
        ss = warp_sum(ss);
        if (lane == 0) norm_scale[r] = rsqrtf(ss / float(HD) + rope.norms.eps);
      }
      __syncthreads();
    }
    // A thread a pair of q's dims: a rotated pair (a, b) of rope.cuh, or two dims past n_dims.
    for (int i = threadIdx.x; i < kRows * HD / 2; i += kDecodeThreads) {
      const int r = i / (HD / 2), pair = i % (HD / 2), rotated = rope.n_dims / 2;
      int a = rope.n_dims + 2 * (pair - rotated), b = a + 1;
      if (pair < rotated) rope_pair_dims(pair, rope, a, b);
      float va = 0, vb = 0;
      if (r < nrows) {
        const float *qh = q + (qh0 + r) * HD;
        va = qh[a], vb = qh[b];
        if (normed) va *= norm_scale[r] * rope.norms.w0[a], vb *= norm_scale[r] * rope.norms.w0[b];
        if (pair < rotated) {
          const float c = rope_cs[pair].x, sn = rope_cs[pair].y, ra = va * c - vb * sn;
          vb = va * sn + vb * c, va = ra;
        }
      }
      qs[r][a] = va * scores.scale, qs[r][b] = vb * scores.scale;
    }
    const int64_t begin = int64_t(z) * chunk, end = begin + chunk < n_past + 1 ? begin + chunk : n_past + 1;
    if (begin <= n_past && n_past < end) {  // this chunk holds the new key: into the caches, read back below
      const int64_t at = kv_row(kv, slot, n_past) * kvd + int64_t(kvh) * HD;
      for (int i = threadIdx.x; i < HD; i += kDecodeThreads) {
        st(kc + at + i, rope.n_dims > 0 ? rope_value(kt + int64_t(kvh) * HD, i, rope, rope_cs, normed ? rope.norms.w1 : nullptr,
                                                     normed ? norm_scale[nrows] : 1.0f)
                                        : kt[int64_t(kvh) * HD + i]);
        st(vc + at + i, vt_new[int64_t(kvh) * HD + i]);
      }
    }
    __syncthreads();  // q in shared memory; the new row visible to the block's loads
    // Keys before the token's window are skipped (a chunk wholly before it reads none).
    const int64_t from = first_key(scores, n_past) > begin ? first_key(scores, n_past) : begin;
    if constexpr (kMma) {
      // Q as the warps' A fragments: lane ln's four values of k step kk (decode_walk_mma's order).
      for (int i = threadIdx.x; i < HD / 16 * 32; i += kDecodeThreads) {
        const int kk = i / 32, ln = i % 32;
        const float4 v = *reinterpret_cast<const float4 *>(&qs[ln / 4][32 * (kk / 2) + 8 * (ln % 4) + 4 * (kk % 2)]);
        const __half2 h0 = __floats2half2_rn(v.x, v.y), h1 = __floats2half2_rn(v.z, v.w);
        const float2 b0 = __half22float2(h0), b1 = __half22float2(h1);
        qfrag[i] = make_uint4(as_word(h0), as_word(h1), pack_half2(v.x - b0.x, v.y - b0.y), pack_half2(v.z - b1.x, v.w - b1.y));
      }
      __syncthreads();
      decode_walk_mma<HD>(qfrag, kc, vc, vt, kv, slot, int64_t(kvh) * HD, kvd, scores, from, end, warp, lane, wm[warp], wl[warp],
                          wacc(warp, 0));
      if (item + gridDim.x >= tokens * n_kv * row_blocks * splits) release_dependents();  // only the block's merge is left (grid.cuh)
    } else {
      float m[kRows], l[kRows], acc[kRows][D];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        m[r] = -INFINITY, l[r] = 0;
#pragma unroll
        for (int i = 0; i < D; ++i) acc[r][i] = 0;
      }
      for (int64_t k0 = from + warp * 32; k0 < end; k0 += kDecodeWarps * 32) {
        const int keys = end - k0 < 32 ? int(end - k0) : 32;
        // V rows of the tile on their way into shared memory.
        for (int c = lane; c < keys * kPieces; c += 32) {
          const int j = c / kPieces, piece = c % kPieces;
          cp_async16(reinterpret_cast<uint4 *>(vt + j * HD) + piece,
                     reinterpret_cast<const uint4 *>(vc + kv_row(kv, slot, k0 + j) * kvd + int64_t(kvh) * HD) + piece);
        }
        const int64_t pos = k0 + lane;
        float s[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) s[r] = 0;
        if (pos < end) {
          // The key row as raw 16-byte pieces, up to 16 in flight at once (all of an f16 row).
          constexpr int kPass = kPieces < 16 ? kPieces : 16, kPer = 16 / int(sizeof(T));
          const uint4 *kr = reinterpret_cast<const uint4 *>(kc + kv_row(kv, slot, pos) * kvd + int64_t(kvh) * HD);
#pragma unroll
          for (int p0 = 0; p0 < kPieces; p0 += kPass) {
            uint4 raw[kPass];
#pragma unroll
            for (int c = 0; c < kPass; ++c) raw[c] = kr[p0 + c];
#pragma unroll
            for (int c = 0; c < kPass; ++c) {
              float kv[8];
              unpack16(raw[c], kc, kv);
#pragma unroll
              for (int e = 0; e < kPer; e += 4)
#pragma unroll
                for (int r = 0; r < kRows; ++r) {
                  const float4 qq = *reinterpret_cast<const float4 *>(&qs[r][(p0 + c) * kPer + e]);
                  s[r] += qq.x * kv[e] + qq.y * kv[e + 1] + qq.z * kv[e + 2] + qq.w * kv[e + 3];
                }
            }
          }
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          s[r] = pos < end ? cap_score(scores, s[r]) : -INFINITY;
          const float m_new = fmaxf(m[r], warp_max(s[r]));
          const float p = m_new == -INFINITY ? 0.0f : expf(s[r] - m_new);
          const float corr = m_new == -INFINITY ? 1.0f : expf(m[r] - m_new);
          l[r] = l[r] * corr + warp_sum(p);
          m[r] = m_new;
#pragma unroll
          for (int i = 0; i < D; ++i) acc[r][i] *= corr;
          s[r] = p;
        }
        cp_async_wait_all();
        __syncwarp();
#pragma unroll 4
        for (int j = 0; j < keys; ++j) {
          float v[D];
#pragma unroll
          for (int i = 0; i < D; ++i) v[i] = ldf(vt + j * HD + lane * D + i);
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            const float pj = __shfl_sync(0xffffffffu, s[r], j);
#pragma unroll
            for (int i = 0; i < D; ++i) acc[r][i] += pj * v[i];
          }
        }
        __syncwarp();  // the tile is read before the next one lands
      }
      if (item + gridDim.x >= tokens * n_kv * row_blocks * splits) release_dependents();  // only the block's merge is left (grid.cuh)
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (lane == 0) wm[warp][r] = m[r], wl[warp][r] = l[r];
#pragma unroll
        for (int i = 0; i < D; ++i) wacc(warp, r)[lane * D + i] = acc[r][i];
      }
    }
    __syncthreads();
    // Each row's weights over the warps, e^(m_w - max) in place of m_w (0 for a warp that saw no
    // key), and its denominator: a thread a row, so the output's threads only add products.
    if (threadIdx.x < nrows) {
      const int r = threadIdx.x;
      float mx = -INFINITY, den = 0;
      for (int w = 0; w < kDecodeWarps; ++w) mx = fmaxf(mx, wm[w][r]);
      for (int w = 0; w < kDecodeWarps; ++w) {
        const float e = wl[w][r] > 0 ? expf(wm[w][r] - mx) : 0.0f;
        den += e * wl[w][r], wm[w][r] = e;
      }
      row_max[r] = mx, merge_den[r] = den;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nrows * HD; i += kDecodeThreads) {
      const int r = i / HD, d = i % HD;
      float num = 0;
#pragma unroll
      for (int w = 0; w < kDecodeWarps; ++w) num += wm[w][r] * wacc(w, r)[d];
      const float den = merge_den[r];
      if (used == 1) {
        out[(qh0 + r) * HD + d] = den > 0 ? num / den : 0.0f;
      } else {
        const int64_t prow = int64_t(z) * tokens * n_head + qh0 + r;
        partials[prow * HD + d] = num;
        if (d == 0) reinterpret_cast<float2 *>(partials + int64_t(splits) * tokens * n_head * HD)[prow] = make_float2(row_max[r], den);
      }
    }
    if (used == 1) continue;
    __threadfence();  // this block's partials are visible before it counts itself done
    __syncthreads();
    if (threadIdx.x == 0) last_block = atomicAdd(&counters[tally], 1) == used - 1;
    __syncthreads();
    if (!last_block) continue;
    __threadfence();
    // The merge, in three passes so that every load is independent of the others (a running
    // max over the splits made each output element's loads a chain: at 64 splits, 16,384
    // cached keys, that chain was most of the step's attention time). __ldcg: other SMs wrote
    // the partials; skip this SM's L1, which may hold an earlier step's. The V tiles' shared
    // memory is free now: each row's split maxima (then weights) and sums go there.
    float *split_w = reinterpret_cast<float *>(vtiles), *split_l = split_w + kRows * used;
    const float2 *ml = reinterpret_cast<const float2 *>(partials + int64_t(splits) * tokens * n_head * HD);
    for (int i = threadIdx.x; i < nrows * used; i += kDecodeThreads) {
      const int r = i / used, zz = i % used;
      const float2 v = __ldcg(ml + int64_t(zz) * tokens * n_head + qh0 + r);
      split_w[i] = v.x, split_l[i] = v.y;
    }
    __syncthreads();
    for (int r = warp; r < nrows; r += kDecodeWarps) {  // a warp a row: its max, weights and denominator
      float mx = -INFINITY, den = 0;
      for (int zz = lane; zz < used; zz += 32)
        if (split_l[r * used + zz] > 0) mx = fmaxf(mx, split_w[r * used + zz]);
      mx = warp_max(mx);
      for (int zz = lane; zz < used; zz += 32) {
        const float lz = split_l[r * used + zz], wz = lz > 0 ? expf(split_w[r * used + zz] - mx) : 0.0f;
        split_w[r * used + zz] = wz, den += wz * lz;
      }
      den = warp_sum(den);
      if (lane == 0) merge_den[r] = den;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nrows * HD / 4; i += kDecodeThreads) {
      const int r = i / (HD / 4), d4 = i % (HD / 4);
      float4 num = make_float4(0, 0, 0, 0);
#pragma unroll 8
      for (int zz = 0; zz < used; ++zz) {
        const float wz = split_w[r * used + zz];
        const float4 v = __ldcg(reinterpret_cast<const float4 *>(partials + (int64_t(zz) * tokens * n_head + qh0 + r) * HD) + d4);
        num.x += wz * v.x, num.y += wz * v.y, num.z += wz * v.z, num.w += wz * v.w;
      }
      const float den = merge_den[r], inv = den > 0 ? 1.0f / den : 0.0f;
      reinterpret_cast<float4 *>(out + (qh0 + r) * HD)[d4] = make_float4(num.x * inv, num.y * inv, num.z * inv, num.w * inv);
    }
    if (threadIdx.x == 0) counters[tally] = 0;  // ready for the next step (and graph replay)
  }
}

struct Plan {
  int64_t row_tiles, chunk;
  int splits;
  bool decode;     // flash_decode_kernel: one token per sequence, <= 8 query heads per KV head
  int decode_rows;  // its query heads per block: a KV head's group (8), or one each (1)
};

constexpr int kMaxDecodeCounters = 16384;  // the counters the device keeps (minfer_cuda_flash_counters)
// A step's caches up to this many positions (tokens x max_positions): a block per query head;
// 512 where the group is on tensor cores (H100, a 7B Q4_0's tg128: 4096 there gave @ d2048
// 356 t/s against 415 and batched B16 4,122 against 4,503, 2048 @ d512 400 against 421 and @
// d1024 339 against 408; 256 gave @ d256 424 against 428).
constexpr int64_t kOneRowPositions = 4096, kOneRowPositionsMma = 512;

// Whether the one-token kernel is built for this head size and cache type (heads of 256, as
// Gemma's: f16 caches only, one query head per block, so its V tiles and partial outputs fit
// shared memory).
bool decode_kernel_for(int hd, int32_t dtype) { return hd == 64 || hd == 128 || (hd == 256 && dtype == MINFER_DTYPE_F16); }

// Splits so that about two blocks per SM are busy, each chunk at least kMinChunk keys.
// decode: one token of each sequence (the one-token kernel's case, where it is built for
// (hd, dtype)). max_positions: a sequence's most. tile_rows: the prefill kernel's rows per
// block (kRows, or kTcRows for the tensor-core one).
Plan plan_for(int64_t tokens, bool decode, int n_head, int n_kv, int hd, int32_t dtype, int64_t max_positions, int sm_count,
              int tile_rows = kRows) {
  Plan p{};
  decode = decode && decode_kernel_for(hd, dtype);
  // A block per query head while the step's caches fit L2 (each head rereads its KV head's
  // rows): a lane's dot products are one head's, not the group's — the group made a serial
  // chain that cost a 7B ~16 us a layer even at a handful of keys (in f32 arithmetic; on
  // tensor cores, decode_walk_mma, the group form still cost a 7B's tg128 3.6% there).
  // Heads of 256: always.
  const int64_t one_row = group_on_tensor_cores(hd, dtype) ? kOneRowPositionsMma : kOneRowPositions;
  const int rows = hd == 256 || tokens * max_positions <= one_row ? 1 : kDecodeRows;
  const int64_t counters = tokens * n_head;  // the most it may need (one block row per query head), whatever max_positions
  if (decode && n_head / n_kv <= kDecodeRows && counters <= kMaxDecodeCounters) {
    // Chunks of `least` keys at least, up to two blocks per SM (no more: a second wave).
    const int64_t base = tokens * n_kv, most = std::max<int64_t>(1, 2 * int64_t(sm_count > 0 ? sm_count : 132) / base);
    const int64_t least = rows == 1 ? kDecodeChunk : kDecodeGroupChunk;
    int64_t splits = (max_positions + least - 1) / least;
    if (splits > most) splits = most;
    if (splits < 1) splits = 1;
    p.decode = true, p.row_tiles = 1, p.splits = int(splits);
    p.chunk = ((max_positions + splits - 1) / splits + 31) / 32 * 32;
    p.decode_rows = rows;
    return p;
  }
  p.row_tiles = (tokens * (n_head / n_kv) + tile_rows - 1) / tile_rows;
  // Split when the blocks would not fill the GPU: about two per SM for the scalar kernel; the
  // tensor-core one splits only below half an SM each, as its merge pass costs about what a
  // lone block's longer walk does (0.5B pp512: 27 us + 15 us merge with three splits).
  const int64_t sms = sm_count > 0 ? sm_count : 132, base = int64_t(n_kv) * p.row_tiles;
  const int64_t want = tile_rows == kTcRows ? sms / 2 : 2 * sms;
  int64_t splits = base >= want ? 1 : (want + base - 1) / base;
  const int64_t most = (max_positions + kMinChunk - 1) / kMinChunk;
  if (splits > most) splits = most;
  if (splits < 1) splits = 1;
  p.splits = int(splits);
  p.chunk = ((max_positions + splits - 1) / splits + kKeys - 1) / kKeys * kKeys;
  return p;
}

template <class T, int HD, int kRows>
cudaError_t launch_decode_rows(minfer_cuda_launch_cfg *cfg, const float *q, const float *k_new, const float *v_new, void *kc, void *vc, float *out,
                               float *partials, int *counters, int64_t tokens, int n_head, int n_kv, const minfer_cuda_kv_pages &kv, const minfer_cuda_attn_scores &scores,
                               const Plan &p, const int32_t *rope_pos, const minfer_cuda_rope &rope) {
  const int64_t items = tokens * n_kv * ((n_head / n_kv + kRows - 1) / kRows) * p.splits;
  const unsigned grid = unsigned(items < cfg->max_blocks ? items : cfg->max_blocks);
  // Static and dynamic shared memory together pass the 48 KiB a kernel gets without asking.
  constexpr size_t smem = decode_smem_bytes<T, HD, kRows>();
  const cudaError_t e = cudaFuncSetAttribute(flash_decode_kernel<T, HD, kRows>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e != cudaSuccess) return e;
  launch_kernel(cfg, flash_decode_kernel<T, HD, kRows>, grid, kDecodeThreads, smem, q, k_new, v_new, static_cast<T *>(kc), static_cast<T *>(vc), out,
                                                                                 partials, counters, tokens, n_head, n_kv, kv, scores, p.splits,
                                                                                 p.chunk, rope_pos, rope);
  return cudaGetLastError();
}

template <class T, int HD>
cudaError_t launch_decode(minfer_cuda_launch_cfg *cfg, const float *q, const float *k_new, const float *v_new, void *kc, void *vc, float *out,
                          float *partials, int *counters, int64_t tokens, int n_head, int n_kv, const minfer_cuda_kv_pages &kv, const minfer_cuda_attn_scores &scores,
                          const Plan &p, const int32_t *rope_pos, const minfer_cuda_rope &rope) {
  if (HD == 256 || p.decode_rows == 1)  // (heads of 256: built for one query head a block only)
    return launch_decode_rows<T, HD, 1>(cfg, q, k_new, v_new, kc, vc, out, partials, counters, tokens, n_head, n_kv, kv, scores, p, rope_pos, rope);
  if constexpr (HD != 256)
    return launch_decode_rows<T, HD, kDecodeRows>(cfg, q, k_new, v_new, kc, vc, out, partials, counters, tokens, n_head, n_kv, kv, scores, p,
                                                  rope_pos, rope);
  return cudaErrorNotSupported;
}

template <int HD>
cudaError_t launch_tc(minfer_cuda_launch_cfg *cfg, const float *q, const void *kc, const void *vc, float *out, float *partials,
                      int64_t tokens, int n_head, int n_kv, const minfer_cuda_kv_pages &kv, const minfer_cuda_attn_scores &scores, const Plan &p) {
  constexpr size_t smem = tc_smem_bytes<HD>();
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(flash_attention_tc_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
  }
  const int64_t items = int64_t(n_kv) * p.row_tiles * p.splits;
  const unsigned grid = unsigned(items < cfg->max_blocks ? items : cfg->max_blocks);
  launch_kernel(cfg, flash_attention_tc_kernel<HD>, grid, kTcThreads, smem, q, static_cast<const __half *>(kc), static_cast<const __half *>(vc),
                                                                         out, partials, tokens, n_head, n_kv, kv, scores, p.row_tiles,
                                                                         p.splits, p.chunk);
  return cudaGetLastError();
}

template <class T, int HD>
cudaError_t launch(minfer_cuda_launch_cfg *cfg, const float *q, const void *kc, const void *vc, float *out, float *partials,
                   int64_t tokens, int n_head, int n_kv, const minfer_cuda_kv_pages &kv, const minfer_cuda_attn_scores &scores, const Plan &p) {
  const size_t smem = smem_bytes<HD>();
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(flash_attention_kernel<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
  }
  const int64_t items = int64_t(n_kv) * p.row_tiles * p.splits;
  const unsigned grid = unsigned(items < cfg->max_blocks ? items : cfg->max_blocks);
  launch_kernel(cfg, flash_attention_kernel<T, HD>, grid, kThreads, smem, q, static_cast<const T *>(kc), static_cast<const T *>(vc), out,
                                                                       partials, tokens, n_head, n_kv, kv, scores, p.row_tiles,
                                                                       p.splits, p.chunk);
  return cudaGetLastError();
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" int minfer_cuda_flash_attention_supports(int32_t head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

extern "C" int32_t minfer_cuda_flash_attention_counters() { return kMaxDecodeCounters; }

extern "C" const char *minfer_cuda_flash_attention_kernel(int64_t tokens, int decode, int32_t n_head, int32_t n_kv, int32_t head_dim,
                                                          int32_t dtype) {
  if (!minfer_cuda_flash_attention_supports(head_dim) || (dtype != MINFER_DTYPE_F16 && dtype != MINFER_DTYPE_F32)) return nullptr;
  if (plan_for(tokens, decode != 0, n_head, n_kv, head_dim, dtype, 1, 1).decode) return "flash_decode_kernel";
  // Heads of 256 prefill on the f32-arithmetic kernel (the tensor-core one's fragments would
  // not fit its registers), an f16 cache converted as it is staged.
  return dtype == MINFER_DTYPE_F16 && head_dim != 256 ? "flash_attention_tc_kernel" : "flash_attention_kernel";
}

extern "C" int64_t minfer_cuda_flash_attention_partials_bytes(int64_t tokens, int decode, int32_t n_head, int32_t n_kv, int32_t head_dim,
                                                              int32_t dtype, int64_t max_positions, int32_t sm_count) {
  int64_t splits = 1;  // the larger of the two prefill kernels' plans (or the decode one's)
  for (int tile_rows : {kRows, kTcRows}) {
    const Plan p = plan_for(tokens, decode != 0, n_head, n_kv, head_dim, dtype, max_positions, sm_count, tile_rows);
    splits = p.splits > splits ? p.splits : splits;
  }
  return splits == 1 ? 0 : splits * tokens * n_head * (head_dim + 2) * int64_t(sizeof(float));
}

extern "C" int minfer_cuda_flash_attention_writes_kv(int64_t tokens, int decode, int32_t n_head, int32_t n_kv, int32_t head_dim, int32_t dtype) {
  return minfer_cuda_flash_attention_supports(head_dim) && plan_for(tokens, decode != 0, n_head, n_kv, head_dim, dtype, 1, 1).decode;
}

extern "C" cudaError_t minfer_cuda_flash_attention(minfer_cuda_launch_cfg *cfg, const float *q, const float *k_new, const float *v_new,
                                                   void *kc, void *vc, int32_t dtype, float *out, float *partials, int *counters,
                                                   int64_t tokens, int decode, int32_t n_head, int32_t n_kv, int32_t hd,
                                                   minfer_cuda_kv_pages kv, int64_t max_positions, minfer_cuda_attn_scores scores, int32_t sm_count,
                                                   const int32_t *rope_pos, const minfer_cuda_rope *rope) {
  const Plan p = plan_for(tokens, decode != 0, n_head, n_kv, hd, dtype, max_positions, sm_count);
  cudaError_t e = cudaErrorNotSupported;
  if (rope && !p.decode) return cudaErrorInvalidValue;  // only the one-token kernel rotates
  if (p.decode) {
    const minfer_cuda_rope r = rope ? *rope : minfer_cuda_rope{0, 0, 0, 0, nullptr, 1.0f};
    if (dtype == MINFER_DTYPE_F16 && hd == 64) e = launch_decode<__half, 64>(cfg, q, k_new, v_new, kc, vc, out, partials, counters, tokens, n_head, n_kv, kv, scores, p, rope_pos, r);
    if (dtype == MINFER_DTYPE_F16 && hd == 128) e = launch_decode<__half, 128>(cfg, q, k_new, v_new, kc, vc, out, partials, counters, tokens, n_head, n_kv, kv, scores, p, rope_pos, r);
    if (dtype == MINFER_DTYPE_F16 && hd == 256) e = launch_decode<__half, 256>(cfg, q, k_new, v_new, kc, vc, out, partials, counters, tokens, n_head, n_kv, kv, scores, p, rope_pos, r);
    if (dtype == MINFER_DTYPE_F32 && hd == 64) e = launch_decode<float, 64>(cfg, q, k_new, v_new, kc, vc, out, partials, counters, tokens, n_head, n_kv, kv, scores, p, rope_pos, r);
    if (dtype == MINFER_DTYPE_F32 && hd == 128) e = launch_decode<float, 128>(cfg, q, k_new, v_new, kc, vc, out, partials, counters, tokens, n_head, n_kv, kv, scores, p, rope_pos, r);
    cfg->kernel_name = minfer_cuda_flash_attention_kernel(tokens, decode, n_head, n_kv, hd, dtype);
    cfg->kernel_dtype = dtype;
    return e;
  }
  // f16 caches on tensor cores (heads up to 128); f32 caches, and heads of 256, keep f32 arithmetic.
  const bool tc = dtype == MINFER_DTYPE_F16 && hd != 256;
  const Plan pt = plan_for(tokens, false, n_head, n_kv, hd, dtype, max_positions, sm_count, tc ? kTcRows : kRows);
  if (tc && hd == 64) e = launch_tc<64>(cfg, q, kc, vc, out, partials, tokens, n_head, n_kv, kv, scores, pt);
  if (tc && hd == 128) e = launch_tc<128>(cfg, q, kc, vc, out, partials, tokens, n_head, n_kv, kv, scores, pt);
  if (dtype == MINFER_DTYPE_F16 && hd == 256) e = launch<__half, 256>(cfg, q, kc, vc, out, partials, tokens, n_head, n_kv, kv, scores, pt);
  if (dtype == MINFER_DTYPE_F32 && hd == 64) e = launch<float, 64>(cfg, q, kc, vc, out, partials, tokens, n_head, n_kv, kv, scores, pt);
  if (dtype == MINFER_DTYPE_F32 && hd == 128) e = launch<float, 128>(cfg, q, kc, vc, out, partials, tokens, n_head, n_kv, kv, scores, pt);
  if (dtype == MINFER_DTYPE_F32 && hd == 256) e = launch<float, 256>(cfg, q, kc, vc, out, partials, tokens, n_head, n_kv, kv, scores, pt);
  cfg->kernel_name = minfer_cuda_flash_attention_kernel(tokens, decode, n_head, n_kv, hd, dtype);
  cfg->kernel_dtype = dtype;
  if (e != cudaSuccess || pt.splits == 1) return e;
  const int64_t rows = tokens * n_head;
  launch_kernel(cfg, flash_merge_kernel, unsigned(rows < cfg->max_blocks ? rows : cfg->max_blocks), 64, 0, partials, out, tokens, n_head,
                                                                                                       n_kv, hd, pt.splits);
  return launched(cfg, "flash_merge_kernel", dtype);
}
