// plugins/cuda/kernels/few_token_mma.cu — matmul for a few tokens (2..64: batched decode
// steps) on int8 tensor cores: y[t] = W x[t] with Q4_0 or Q4_K weights, x quantized as for MMQ.
//
// Between the one-token GEMV and MMQ every earlier path was bound by instructions, not bytes:
// the dp4a GEMV (mmvq.cu) spends its work per token, MMQ its tile loads and scale arithmetic,
// and f16 tensor cores (this file's first kernel) a dequantization per weight: a 7B gate
// matrix cost 28 us at 4 tokens and 36-48 us at 8-32. Here the weights ride in the M
// dimension of mma.m16n8k32 (s8) as the nibbles they are: a lane's 32-bit word of a Q4_0
// block's quantized bytes 4q..4q+3 holds positions 4q..4q+3 (low nibbles: A register a0 or
// a1) and 16+4q..16+4q+3 (high: a2 or a3), so a mask, a shift and a mask make a row's A
// registers for a block; the tokens ride in N, eight a tile. The integer product of a block
// uses nibbles 0..15; the -8 comes back through the activations' scaled sum: d_w (d_x
// sum(q_w q_x) - 8 d_x sum(q_x)). One mma covers 16 rows x 32 values x 8 tokens for ~13
// instructions. Measured (H200, ncu): 18 us on a 7B gate or down matrix from 2 to 8 tokens,
// 22 at 16, 30 at 32, 57-64 at 64 (MMQ: 66-80 throughout). A Q4_K sub-block is 32 values of
// one nibble half of 32 bytes, with its own 6-bit scale and min: the same mma, then d sc (d_x
// sum(q_w q_x)) - dmin m (d_x sum(q_x)).
//
// Both sides come through shared memory by cp.async in 16-byte pieces, 256 values a stage
// (144 bytes of a Q4_0 or Q4_K row, two MMQ runs of a token), several stages in flight.
// A row's 144 bytes are 36 words: the eight rows a warp reads at once fall on distinct banks
// at every word; a token's stage is 320 bytes kept 336 apart for the same reason. A warp
// makes 32 rows (two m16 tiles; gated 16 gate rows and the same 16 up rows) x all tokens over
// its share of the work: stream-K (first_item) keeps every block of the one wave busy to the
// end, whatever the rows. Rows must be whole 16-byte pieces: k a multiple of 256.
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "async_copy.cuh"
#include "few_token.cuh"
#include "glu.cuh"
#include "grid.cuh"
#include "mma_s8.cuh"
#include "minfer/blocks.h"
#include "minfer/dtype.h"
#include "q8_act.cuh"

namespace minfer::cuda::few_token {
namespace {

constexpr int kStageBlocks = 8;                     // blocks of k per stage
constexpr int kWRowBytes = kStageBlocks * int(sizeof(minfer_block_q4_0));  // 144: nine 16-byte pieces
static_assert(sizeof(minfer_block_q4_k) == kWRowBytes, "a Q4_K block is a stage of a row, as eight Q4_0 blocks");
constexpr int kXRunBytes = int(sizeof(minfer_cuda_q8_act4));               // 160: four blocks of a token
constexpr int kXStageBytes = 2 * kXRunBytes, kXStride = kXStageBytes + 16; // 320 in 336
static_assert(kWRowBytes % 16 == 0 && (kWRowBytes / 4) % 8 == 4, "rows g of a warp's read on distinct banks");
static_assert((kXStride / 4) % 8 == 4, "tokens g of a warp's read on distinct banks");

// Stages in the pipeline: two blocks an SM, each with two or three stages (36-54 KiB of
// weights) in flight while it works on one. Measured (H200, 7B gate at 4 and 16 tokens):
// three stages at three blocks an SM were 4-25% slower.
constexpr int stages_for(int tiles) { return tiles <= 2 ? 4 : tiles <= 4 ? 3 : 2; }
constexpr size_t stage_bytes(int tiles) { return size_t(kBlockRows) * kWRowBytes + size_t(8 * tiles) * kXStride; }
constexpr size_t smem_bytes(int tiles) { return stages_for(tiles) * stage_bytes(tiles); }

// A row's quantized word q of block u (0..7) of a stage and the block's scale. Blocks come in
// pairs of 36 bytes (nine words): the odd block's 16 bytes are words 5..8, the even one's
// straddle words 0..4 by two bytes.
__device__ __forceinline__ uint32_t q4_word(const uint32_t *row, int u, int q) {
  const uint32_t *pair = row + 9 * (u >> 1);
  return (u & 1) ? pair[5 + q] : __byte_perm(pair[q], pair[q + 1], 0x5432);
}
__device__ __forceinline__ float q4_scale(const uint32_t *row, int u) {
  const uint32_t *pair = row + 9 * (u >> 1);
  return __half2float(__ushort_as_half((u & 1) ? uint16_t(pair[4] >> 16) : uint16_t(pair[0])));
}

// Q4_K: a row's block is words 0 (d, dmin), 1..3 (the 12 bytes of 6-bit scales and mins, as
// get_scale_min_k4 packs them) and 4..35 (qs: sub-blocks 2jj and 2jj + 1 are the low and high
// nibbles of bytes 32jj..32jj+31). The (scale, min) of sub-block j, read where it is needed (kept
// for the whole stage they cost the registers a 64-token tile needs).
__device__ __forceinline__ float2 q4_k_dmin(const uint32_t *row) {
  const uint32_t w0 = row[0];
  return {__half2float(__ushort_as_half(uint16_t(w0))), __half2float(__ushort_as_half(uint16_t(w0 >> 16)))};
}
__device__ __forceinline__ float2 q4_k_sub(const uint32_t *row, float2 dm, int j) {
  const int sh = 8 * (j & 3);
  uint32_t sc, mn;
  if (j < 4) {
    sc = (row[1] >> sh) & 63, mn = (row[2] >> sh) & 63;
  } else {
    const uint32_t w3 = row[3] >> sh;
    sc = (w3 & 0xF) | (((row[1] >> (sh + 6)) & 3) << 4), mn = ((w3 >> 4) & 0xF) | (((row[2] >> (sh + 6)) & 3) << 4);
  }
  return {dm.x * float(sc), dm.y * float(mn)};
}

// kQ4K: Q4_K rows (a block of 256 values is 144 bytes, as Q4_0's eight: the same stages and
// copies); else Q4_0.
template <int kTiles, bool kGated, bool kQ4K>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) few_token_mma_kernel(const __grid_constant__ FewParts parts,
                                                                                const minfer_cuda_q8_act4 *x, int64_t k, int64_t tokens) {
  wait_for_inputs();
  constexpr int kStages = stages_for(kTiles), kTok = 8 * kTiles;
  constexpr int kWPieces = kBlockRows * (kWRowBytes / 16) / (kWarps * 32);  // 9 a thread a stage
  constexpr int kXPieces = kTok * (kXStageBytes / 16);                      // 20 a token
  extern __shared__ __align__(16) uint8_t smem[];
  const auto wsm = [&](int buf) { return smem + size_t(buf) * stage_bytes(kTiles); };
  const auto xsm = [&](int buf) { return wsm(buf) + kBlockRows * kWRowBytes; };
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int64_t nb = k / 32, stages = nb / kStageBlocks, runs = (nb + 3) / 4, row_bytes = nb * int64_t(sizeof(minfer_block_q4_0));
  const int64_t total = parts.blocks_end[kParts - 1] * stages;
  const int64_t i0 = first_item(blockIdx.x, total, gridDim.x), i1 = first_item(blockIdx.x + 1, total, gridDim.x);

  // The copies: item ii's weight pieces (a thread's nine keep their rows through a row block;
  // rows past the end copy the last row) and its stage of every token (zeros past the tokens).
  int64_t ii = i0, rb_issued = -1;
  const uint8_t *src[kWPieces];
  const auto issue = [&](int buf) {
    if (ii < i1) {
      const int64_t rb = ii / stages, s = ii - rb * stages;
      if (rb != rb_issued) {
        rb_issued = rb;
        const RowBlock b = row_block<kGated>(parts, rb);
        const uint8_t *w = static_cast<const uint8_t *>(pick(parts.w, b.p)), *up = static_cast<const uint8_t *>(parts.up);
#pragma unroll
        for (int j = 0; j < kWPieces; ++j) {
          const int idx = threadIdx.x + kWarps * 32 * j, lr = idx / (kWRowBytes / 16), piece = idx % (kWRowBytes / 16);
          const int64_t o_want = part_row<kGated>(b.base, lr), o = o_want < b.m ? o_want : b.m - 1;
          src[j] = (kGated && (lr & 16) ? up : w) + o * row_bytes + 16 * piece;
        }
      }
      uint8_t *ws = wsm(buf);
#pragma unroll
      for (int j = 0; j < kWPieces; ++j) cp_async16(ws + (threadIdx.x + kWarps * 32 * j) * 16, src[j] + s * kWRowBytes);
      uint8_t *xs = xsm(buf);
#pragma unroll
      for (int j = 0; j < (kXPieces + kWarps * 32 - 1) / (kWarps * 32); ++j) {
        const int idx = threadIdx.x + kWarps * 32 * j, t = idx / (kXStageBytes / 16), piece = idx % (kXStageBytes / 16);
        if (kXPieces % (kWarps * 32) != 0 && idx >= kXPieces) break;
        const bool live = t < tokens;
        const uint8_t *from = reinterpret_cast<const uint8_t *>(x + (live ? t : 0) * runs + 2 * s) + 16 * piece;
        cp_async16_zfill(xs + t * kXStride + 16 * piece, from, live ? 16 : 0);
      }
      ++ii;
    }
    cp_async_commit();  // empty groups past the range keep the wait count simple
  };

  float acc[kTiles][kRowTiles][4];
  run_items<kStages, kTiles, kGated>(parts, acc, i0, i1, stages, tokens, issue, [&](int n, int64_t) {
    const auto *wrows = reinterpret_cast<const uint32_t *>(wsm(n) + warp * kWarpRows * kWRowBytes);
    const uint8_t *xs = xsm(n);
    if constexpr (kQ4K) {
      float2 dm[kRowTiles][2];  // [row tile][row g, g + 8]: (d, dmin)
#pragma unroll
      for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) dm[r][h] = q4_k_dmin(wrows + (16 * r + g + 8 * h) * (kWRowBytes / 4));
#pragma unroll
      for (int j = 0; j < 8; ++j) {  // sub-block j: x's block j of the stage
        const int word = 4 + 8 * (j >> 1) + q, shift = 4 * (j & 1);
        uint32_t a[kRowTiles][4];
        float2 s_lo[kRowTiles], s_hi[kRowTiles];  // (d sc, dmin m) of rows g and g + 8
#pragma unroll
        for (int r = 0; r < kRowTiles; ++r) {
          const uint32_t *row_lo = wrows + (16 * r + g) * (kWRowBytes / 4), *row_hi = row_lo + 8 * (kWRowBytes / 4);
          a[r][0] = (row_lo[word] >> shift) & 0x0F0F0F0Fu, a[r][1] = (row_hi[word] >> shift) & 0x0F0F0F0Fu;
          a[r][2] = (row_lo[word + 4] >> shift) & 0x0F0F0F0Fu, a[r][3] = (row_hi[word + 4] >> shift) & 0x0F0F0F0Fu;
          s_lo[r] = q4_k_sub(row_lo, dm[r][0], j), s_hi[r] = q4_k_sub(row_hi, dm[r][1], j);
        }
        // Token tile by token tile (their x read where used: all of them held would spill at 64 tokens).
#pragma unroll
        for (int t = 0; t < kTiles; ++t) {
          const uint8_t *run = xs + (8 * t + g) * kXStride + (j >> 2) * kXRunBytes + 32 + 32 * (j & 3);
          const uint32_t b[2] = {*reinterpret_cast<const uint32_t *>(run + 4 * q), *reinterpret_cast<const uint32_t *>(run + 16 + 4 * q)};
          const uint8_t *xsc = xs + (8 * t + 2 * q) * kXStride + (j >> 2) * kXRunBytes + 8 * (j & 3);
          const float2 ds0 = *reinterpret_cast<const float2 *>(xsc), ds1 = *reinterpret_cast<const float2 *>(xsc + kXStride);
#pragma unroll
          for (int r = 0; r < kRowTiles; ++r) {
            int c[4];
            mma_s8(c, a[r], b);
            // d sc (d_x sum(q_w q_x)) - dmin m (d_x sum(q_x)): c[2h + i] is row g + 8h, token 8t + 2q + i.
            acc[t][r][0] = fmaf(s_lo[r].x, ds0.x * float(c[0]), fmaf(-s_lo[r].y, ds0.y, acc[t][r][0]));
            acc[t][r][1] = fmaf(s_lo[r].x, ds1.x * float(c[1]), fmaf(-s_lo[r].y, ds1.y, acc[t][r][1]));
            acc[t][r][2] = fmaf(s_hi[r].x, ds0.x * float(c[2]), fmaf(-s_hi[r].y, ds0.y, acc[t][r][2]));
            acc[t][r][3] = fmaf(s_hi[r].x, ds1.x * float(c[3]), fmaf(-s_hi[r].y, ds1.y, acc[t][r][3]));
          }
        }
      }
    } else {
#pragma unroll
    for (int u = 0; u < kStageBlocks; ++u) {
      // Token tile t: b0, b1 of token 8t + g; the scales of tokens 8t + 2q and 8t + 2q + 1.
      uint32_t b0[kTiles], b1[kTiles];
      float2 ds0[kTiles], ds1[kTiles];
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        const uint8_t *run = xs + (8 * t + g) * kXStride + (u >> 2) * kXRunBytes + 32 + 32 * (u & 3);
        b0[t] = *reinterpret_cast<const uint32_t *>(run + 4 * q);
        b1[t] = *reinterpret_cast<const uint32_t *>(run + 16 + 4 * q);
        const uint8_t *sc = xs + (8 * t + 2 * q) * kXStride + (u >> 2) * kXRunBytes + 8 * (u & 3);
        ds0[t] = *reinterpret_cast<const float2 *>(sc);
        ds1[t] = *reinterpret_cast<const float2 *>(sc + kXStride);
        ds0[t].y *= -8.0f, ds1[t].y *= -8.0f;
      }
#pragma unroll
      for (int r = 0; r < kRowTiles; ++r) {
        const uint32_t *row_lo = wrows + (16 * r + g) * (kWRowBytes / 4), *row_hi = row_lo + 8 * (kWRowBytes / 4);
        const uint32_t w_lo = q4_word(row_lo, u, q), w_hi = q4_word(row_hi, u, q);
        const float d_lo = q4_scale(row_lo, u), d_hi = q4_scale(row_hi, u);
        const uint32_t a[4] = {w_lo & 0x0F0F0F0Fu, w_hi & 0x0F0F0F0Fu, (w_lo >> 4) & 0x0F0F0F0Fu, (w_hi >> 4) & 0x0F0F0F0Fu};
#pragma unroll
        for (int t = 0; t < kTiles; ++t) {
          int c[4];
          mma_s8(c, a, {b0[t], b1[t]});
          // c[2h + j]: row g + 8h of the tile, token 8t + 2q + j.
          acc[t][r][0] = fmaf(d_lo, fmaf(ds0[t].x, float(c[0]), ds0[t].y), acc[t][r][0]);
          acc[t][r][1] = fmaf(d_lo, fmaf(ds1[t].x, float(c[1]), ds1[t].y), acc[t][r][1]);
          acc[t][r][2] = fmaf(d_hi, fmaf(ds0[t].x, float(c[2]), ds0[t].y), acc[t][r][2]);
          acc[t][r][3] = fmaf(d_hi, fmaf(ds1[t].x, float(c[3]), ds1[t].y), acc[t][r][3]);
        }
      }
    }
    }
  });
}

// Blocks of this kernel an SM holds (its shared memory decides), asked once per instantiation.
template <int kTiles, bool kGated, bool kQ4K>
int blocks_per_sm() {
  static const int n = resident_blocks(few_token_mma_kernel<kTiles, kGated, kQ4K>, smem_bytes(kTiles));
  return n;
}

int int8_blocks_per_sm(int32_t dtype, int64_t tokens, bool gated) {
  return visit_shape(token_tiles(tokens), gated, [&](auto s) {
    constexpr int T = decltype(s)::kTiles;
    constexpr bool G = decltype(s)::kGated;
    return dtype == MINFER_DTYPE_Q4_K ? blocks_per_sm<T, G, true>() : blocks_per_sm<T, G, false>();
  });
}

// The launch's plan by weight type: stages of 256 values (Q4_0) or 128 (Q6_K, few_token_q6k.cu).
Plan plan_for(int32_t dtype, const minfer_cuda_mmq_part *in, int32_t n_parts, const void *up, int64_t k, int64_t tokens, int32_t sm_count) {
  const bool gated = up != nullptr;
  if (dtype == MINFER_DTYPE_Q6_K) return plan(in, n_parts, up, k / 128, sm_count, q6k_blocks_per_sm(tokens, gated));
  return plan(in, n_parts, up, k / (32 * kStageBlocks), sm_count, int8_blocks_per_sm(dtype, tokens, gated));
}

// The sum kernel's launch after a few-token kernel, where stream-K cut row blocks.
void launch_sum(minfer_cuda_launch_cfg *cfg, const Plan &pl, int64_t tokens, bool gated) {
  const auto sum = [&](auto g) {
    constexpr bool G = decltype(g)::kGated;
    const dim3 grid(unsigned(pl.grid), unsigned((tokens + sum_tokens<G>() - 1) / sum_tokens<G>()));
    launch_kernel(cfg, few_token_sum_kernel<G>, grid, kSumThreads, 0, pl.parts, tokens, pl.stages);
    return 0;
  };
  visit_shape(1, gated, sum);
}

}  // namespace
}  // namespace minfer::cuda::few_token

using namespace minfer::cuda;
using namespace minfer::cuda::few_token;

extern "C" int minfer_cuda_few_token_mma_supported(int32_t dtype, int64_t k, int64_t tokens) {
  if (tokens < 1 || tokens > kMaxTokens) return 0;
  return ((dtype == MINFER_DTYPE_Q4_0 || dtype == MINFER_DTYPE_Q4_K) && k % (32 * kStageBlocks) == 0) ||
         (dtype == MINFER_DTYPE_Q6_K && k % kQ6kRowAlign == 0);
}

extern "C" int minfer_cuda_few_token_x_f16(int32_t dtype) { return dtype == MINFER_DTYPE_Q6_K; }

extern "C" size_t minfer_cuda_few_token_partials_bytes(int32_t dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts, const void *up,
                                                       int64_t k, int64_t tokens, int32_t sm_count) {
  if (n_parts < 1 || n_parts > kParts || !minfer_cuda_few_token_mma_supported(dtype, k, tokens)) return 0;
  return partials_bytes(plan_for(dtype, parts, n_parts, up, k, tokens, sm_count), tokens);
}

extern "C" cudaError_t minfer_cuda_few_token_mma(minfer_cuda_launch_cfg *cfg, int32_t dtype, const minfer_cuda_mmq_part *in, int32_t n_parts,
                                                 const void *up, int32_t act, const void *x, int64_t k, int64_t tokens, int32_t sm_count,
                                                 float *partials) {
  if (!minfer_cuda_few_token_mma_supported(dtype, k, tokens)) return cudaErrorNotSupported;
  if (n_parts < 1 || n_parts > kParts || (up && n_parts != 1) || !partials) return cudaErrorInvalidValue;
  const bool q6k = dtype == MINFER_DTYPE_Q6_K;
  // Q4_0 and x: 16-byte pieces; Q6_K rows 4-byte words (k a multiple of 512 keeps every row so).
  const uintptr_t w_align = q6k ? 4 : 16;
  if (reinterpret_cast<uintptr_t>(x) % 16 || reinterpret_cast<uintptr_t>(up) % w_align) return cudaErrorMisalignedAddress;
  for (int i = 0; i < n_parts; ++i)
    if (reinterpret_cast<uintptr_t>(in[i].w) % w_align) return cudaErrorMisalignedAddress;
  Plan pl = plan_for(dtype, in, n_parts, up, k, tokens, sm_count);
  if (pl.grid < 1 || (q6k ? q6k_blocks_per_sm(tokens, up != nullptr) : int8_blocks_per_sm(dtype, tokens, up != nullptr)) < 1)
    return cudaErrorNotSupported;  // the shared memory it wants is not there
  pl.parts.partials = partials;  // minfer_cuda_few_token_partials_bytes said how much
  pl.parts.act = act;
  const char *name = nullptr;
  if (q6k) {
    launch_q6k(cfg, pl, x, k, tokens);
    name = up ? "few_token_q6k_kernel (gate, up)" : "few_token_q6k_kernel";
  } else {
    visit_shape(token_tiles(tokens), up != nullptr, [&](auto s) {
      constexpr int T = decltype(s)::kTiles;
      constexpr bool G = decltype(s)::kGated;
      const auto *xq = static_cast<const minfer_cuda_q8_act4 *>(x);
      if (dtype == MINFER_DTYPE_Q4_K)
        launch_kernel(cfg, few_token_mma_kernel<T, G, true>, unsigned(pl.grid), kWarps * 32, smem_bytes(T), pl.parts, xq, k, tokens);
      else
        launch_kernel(cfg, few_token_mma_kernel<T, G, false>, unsigned(pl.grid), kWarps * 32, smem_bytes(T), pl.parts, xq, k, tokens);
      return 0;
    });
    name = up ? (act == MINFER_CUDA_GLU_GELU ? "few_token_mma_kernel (gate, up, gelu)" : "few_token_mma_kernel (gate, up, silu)")
              : "few_token_mma_kernel";
  }
  cudaError_t e = launched(cfg, name, dtype);
  if (e != cudaSuccess || !cuts_row_blocks(pl)) return e;
  launch_sum(cfg, pl, tokens, up != nullptr);
  return launched(cfg, "few_token_sum_kernel", dtype);
}
