// plugins/cuda/kernels/mmq.cu — prefill matmul on int8 tensor cores, reading the weights' blocks.
//
// y[t][o] = sum over 32-value sub-blocks b of dw[o][b] * dx[t][b] * (q_w[o][b] . q_x[t][b])
// (+ m_w[o][b] * sum x[t][b] for types with a minimum): the weights stay in their GGUF blocks
// (every type of qblock.cuh: no f16 copy) and the activations are quantized to 8 bits per 32
// values (mmvq.cu's quantize kernel, minfer_cuda_q8_act). A 128-thread block makes a 64 x 64
// tile of y (weight rows x tokens), or 128 x 64 (launch()); each warp 32 x 32 (64 x 32) from
// mma.m16n8k32 s8 products. One product covers exactly
// one sub-block on each side, so its int32 result is scaled by the two sides' scales into f32
// accumulators right away, in registers (Q6_K, scaled per 16 values, takes two products).
//
// Per stage, 4 sub-blocks of k (128 values; a whole super-block, 8 sub-blocks, for the K types)
// of the tile's weight rows and 64 tokens are copied into shared memory by cp.async, in
// coalesced 4- and 8-byte pieces and double-buffered: the next stage is in flight while this
// one is unpacked and multiplied. The weights arrive as their raw blocks and are unpacked to
// bytes (qblock.cuh) in shared memory; the tokens' quantized values land straight in rows
// padded so the fragment loads (ldmatrix) of the 8 row groups fall in distinct banks.
#include <cuda_fp16.h>

#include "async_copy.cuh"
#include "grid.cuh"
#include "minfer/blocks.h"
#include "minfer/dtype.h"
#include "q8_act.cuh"
#include "qblock.cuh"


namespace minfer::cuda {
namespace {

constexpr int kTileTokens = 64, kThreads = 128;

// The shared memory of one block, per weight type, tile height and weights per tile (two for
// a gate and an up weight with their SwiGLU); dynamic: over 48 KiB for most.
template <class Block, int kTileRows, int kW = 1>
struct MmqLayout {
  using QB = QBlock<Block>;
  static constexpr int kStageSubs = QB::kSubs == 1 ? 4 : QB::kSubs;  // sub-blocks of k per stage
  static constexpr int kStageBlocks = kStageSubs / QB::kSubs;         // weight blocks of a row per stage
  static constexpr int kSpan = kStageBlocks * int(sizeof(Block));     // a row's bytes per stage
  // The span is copied in 4-byte words from the aligned word below it: blocks are only 2-byte
  // aligned (18, 22, 34, 210 bytes), so it may start 2 bytes into its first word.
  static constexpr int kWords = (kSpan + 2 + 3) / 4;
  static constexpr int kRawStride = kWords % 2 ? kWords * 4 : kWords * 4 + 4;  // an odd number of words: rows in distinct banks
  static constexpr int kRowBytes = kStageSubs * 32 + 16;  // an unpacked row, padded
  static constexpr int kScales = kStageSubs * kTileRows * 4;
  static constexpr int kWq = 0;                                            // int8 [weights][rows][kRowBytes]
  static constexpr int kXq = kWq + kW * kTileRows * kRowBytes;             // int8 [2][tokens][kRowBytes]
  static constexpr int kXds = kXq + 2 * kTileTokens * kRowBytes;           // float2 (d, s) [2][subs][tokens]
  static constexpr int kWd = kXds + 2 * kStageSubs * kTileTokens * 8;      // float [weights][subs][rows]
  static constexpr int kWd2 = kWd + kW * kScales;                          // Q6_K: values 16..31
  static constexpr int kWm = kWd2 + (QB::kTwoScales ? kW * kScales : 0);   // minima
  static constexpr int kRaw = kWm + (QB::kOffset ? kW * kScales : 0);      // raw blocks [2][weights][rows][kRawStride]
  static constexpr int kBytes = kRaw + 2 * kW * kTileRows * kRawStride;
  // Blocks per SM that shared memory allows (of 227 KiB), at most 4 (3 for a tall tile or two
  // weights): the registers' bound.
  static constexpr int kMostBlocks = kTileRows == 64 && kW == 1 ? 4 : 3;
  static constexpr int kMinBlocks = 227 * 1024 / kBytes < kMostBlocks ? 227 * 1024 / kBytes : kMostBlocks;
};

__device__ __forceinline__ void mma_s8(int (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  c[0] = c[1] = c[2] = c[3] = 0;
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four 8x8 b16 matrices from shared memory (lane t gives the address of row t % 8 of matrix
// t / 8); lane t receives 32 bits of each: row t / 4, bytes 4 (t % 4)... For int8 tiles with
// 16-byte rows that is exactly the mma.m16n8k32 fragment layout.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row))
               : "memory");
}

// The weights of one launch, sharing x: part i's row tiles are [tiles_end[i-1], tiles_end[i])
// of the launch's row tiles, so no tile straddles two parts.
struct MmqParts {
  const void *w[kMinferCudaMmqMaxParts];
  float *y[kMinferCudaMmqMaxParts];
  const float *add[kMinferCudaMmqMaxParts];
  int64_t m[kMinferCudaMmqMaxParts], tiles_end[kMinferCudaMmqMaxParts];
  int add_broadcast[kMinferCudaMmqMaxParts];
  int n;
};

// Part p's entry, by selects (a run-time index would copy the parameter to local memory).
template <class T>
__device__ __forceinline__ T pick(const T (&a)[kMinferCudaMmqMaxParts], int p) {
  static_assert(kMinferCudaMmqMaxParts == 3, "pick() spells out three parts");
  return p == 0 ? a[0] : p == 1 ? a[1] : a[2];
}

// kSwiGLU: parts are a gate (0) and an up weight (1) of the same shape; a tile makes both
// products of its rows and writes silu(gate) * up to part 0's y (no add).
template <class Block, int kTileRows, bool kSwiGLU>
__global__ void __launch_bounds__(kThreads, MmqLayout<Block, kTileRows, kSwiGLU ? 2 : 1>::kMinBlocks)
    mmq_kernel(const __grid_constant__ MmqParts parts, const minfer_cuda_q8_act *x, int64_t k, int64_t tokens, int64_t row_tiles,
               int64_t token_tiles) {
  using QB = QBlock<Block>;
  constexpr int kW = kSwiGLU ? 2 : 1;  // weights per tile
  using L = MmqLayout<Block, kTileRows, kW>;
  constexpr int kWarpRows = kTileRows / 2, kI = kWarpRows / 16;  // a warp: kWarpRows x 32 of the tile, kI 16-row groups
  constexpr int S = L::kStageSubs;
  extern __shared__ __align__(16) uint8_t smem[];
  // Weight wi's unpacked rows, scales (second scales, minima) and raw stage buffer `buf`.
  const auto wq_s = [&](int wi) { return smem + L::kWq + wi * kTileRows * L::kRowBytes; };
  const auto wd_s = [&](int wi) { return reinterpret_cast<float *>(smem + L::kWd) + wi * S * kTileRows; };
  const auto wd2_s = [&](int wi) { return reinterpret_cast<float *>(smem + L::kWd2) + wi * S * kTileRows; };
  const auto wm_s = [&](int wi) { return reinterpret_cast<float *>(smem + L::kWm) + wi * S * kTileRows; };
  const auto raw_s = [&](int buf, int wi) { return smem + L::kRaw + (buf * kW + wi) * kTileRows * L::kRawStride; };
  const auto xq_s = [&](int buf) { return smem + L::kXq + buf * kTileTokens * L::kRowBytes; };
  const auto xds_s = [&](int buf) { return reinterpret_cast<float2 *>(smem + L::kXds) + buf * S * kTileTokens; };
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tg = lane % 4;
  const int wm = warp / 2, wn = warp % 2;  // this warp's part of the tile
  const int64_t kb = k / 32, stages = (kb + S - 1) / S, row_bytes = kb / QB::kSubs * int64_t(sizeof(Block));
  for (int64_t tile = blockIdx.x; tile < row_tiles * token_tiles; tile += gridDim.x) {
    const int64_t row_tile = tile % row_tiles, tok0 = (tile / row_tiles) * kTileTokens;
    // The tile's part, kept in shared memory: in registers through the stage loop its rows
    // and weights cost the tall tile its spill-free register budget.
    __shared__ int tile_part;
    if (threadIdx.x == 0) tile_part = row_tile < parts.tiles_end[0] ? 0 : row_tile < parts.tiles_end[1] ? 1 : 2;
    __syncthreads();
    const int64_t row0 = (row_tile - (tile_part == 0 ? 0 : pick(parts.tiles_end, tile_part - 1))) * kTileRows;
    const auto rows_of_part = [&] { return pick(parts.m, tile_part); };
    float acc[kW][kI][4][4] = {};
    // Stage s into buffer `buf`: warp w copies rows (then tokens) w, w + 4, ..., its lanes
    // consecutive words of one row's span, so each copy instruction reads whole sectors. Rows
    // 4 apart share the span's alignment, so a lane's source only steps by 4 rows. Interior
    // stages of whole tiles copy without bounds checks; the last stage and partial tiles clip
    // at the row's end and zero-fill rows and tokens past the matrix.
    const auto copy_stage = [&](int64_t s, int buf) {
      const int64_t m = rows_of_part();
      const bool interior = s + 1 < stages;
#pragma unroll
      for (int wi = 0; wi < kW; ++wi) {
        const uint8_t *const wbytes = static_cast<const uint8_t *>(pick(parts.w, kSwiGLU ? wi : tile_part));
        uint8_t *raw = raw_s(buf, wi) + warp * L::kRawStride;
        const int64_t first = ((row0 + warp) * row_bytes + s * L::kSpan) & ~int64_t(3);  // the span's first word, in the tensor
        const uint8_t *src = wbytes + first;
        if (interior && row0 + kTileRows <= m) {
#pragma unroll 4
          for (int rr = warp; rr < kTileRows; rr += 4, src += 4 * row_bytes, raw += 4 * L::kRawStride)
            for (int wd = lane; wd < L::kWords; wd += 32) cp_async_zfill<4>(raw + 4 * wd, src + 4 * wd, 4);
        } else {
          int64_t left = (row0 + warp + 1) * row_bytes - first;  // bytes of the row from the span's first word on
#pragma unroll 1
          for (int64_t row = row0 + warp; row < row0 + kTileRows; row += 4, src += 4 * row_bytes, raw += 4 * L::kRawStride) {
            for (int wd = lane; wd < L::kWords; wd += 32) {
              const int64_t rest = row < m ? left - 4 * wd : 0;
              const int valid = rest <= 0 ? 0 : rest >= 4 ? 4 : int(rest);
              cp_async_zfill<4>(raw + 4 * wd, valid ? src + 4 * wd : wbytes, valid);
            }
          }
        }
      }
      // The tokens: 5 pieces of 8 bytes per block, (d, s) then the values; lane i's piece is
      // the same for every token, so are its destination's offset and step.
      const bool tokens_whole = interior && tok0 + kTileTokens <= tokens;
#pragma unroll
      for (int i0 = 0; i0 < S * 5; i0 += 32) {
        const int i = i0 + lane, sb = i / 5, piece = i % 5;
        if (i >= S * 5) break;
        uint8_t *dst = piece == 0 ? reinterpret_cast<uint8_t *>(xds_s(buf) + sb * kTileTokens + warp)
                                  : xq_s(buf) + warp * L::kRowBytes + sb * 32 + 8 * (piece - 1);
        const int step = piece == 0 ? 4 * int(sizeof(float2)) : 4 * L::kRowBytes;
        const uint8_t *xsrc = reinterpret_cast<const uint8_t *>(x + (tok0 + warp) * kb + s * S + sb) + 8 * piece;
        const int64_t xstep = 4 * kb * int64_t(sizeof(minfer_cuda_q8_act));
        if (tokens_whole) {
#pragma unroll 4
          for (int tt = warp; tt < kTileTokens; tt += 4, dst += step, xsrc += xstep) cp_async_zfill<8>(dst, xsrc, 8);
        } else {
          const bool block_live = s * S + sb < kb;
#pragma unroll 1
          for (int64_t tok = tok0 + warp; tok < tok0 + kTileTokens; tok += 4, dst += step, xsrc += xstep) {
            const bool live = block_live && tok < tokens;
            cp_async_zfill<8>(dst, live ? xsrc : reinterpret_cast<const uint8_t *>(x), live ? 8 : 0);
          }
        }
      }
    };
    // The weights of the stage in buffer `buf` to bytes and scales.
    const auto unpack_stage = [&](int64_t s, int buf) {
#pragma unroll
      for (int wi = 0; wi < kW; ++wi)
#pragma unroll
        for (int it = 0; it < kTileRows * S / kThreads; ++it) {
          const uint8_t *raw = raw_s(buf, wi);
          const int p = threadIdx.x + it * kThreads, rr = p % kTileRows, sb = p / kTileRows;  // lanes: consecutive rows
          const int shift = int((row0 + rr) * row_bytes + s * L::kSpan) & 3;
          const Block &b = reinterpret_cast<const Block *>(raw + rr * L::kRawStride + shift)[sb / QB::kSubs];
          SubBlock u;
          QB::unpack(b, sb % QB::kSubs, u);
          uint4 *dst = reinterpret_cast<uint4 *>(wq_s(wi) + rr * L::kRowBytes + sb * 32);
          dst[0] = make_uint4(u.q[0], u.q[1], u.q[2], u.q[3]);
          dst[1] = make_uint4(u.q[4], u.q[5], u.q[6], u.q[7]);
          wd_s(wi)[sb * kTileRows + rr] = u.d[0];
          if (QB::kTwoScales) wd2_s(wi)[sb * kTileRows + rr] = u.d[1];
          if (QB::kOffset) wm_s(wi)[sb * kTileRows + rr] = u.m;
        }
    };
    copy_stage(0, 0);
    for (int64_t s = 0; s < stages; ++s) {
      const int cur = int(s & 1);
      cp_async_wait_all();  // this stage's copies (the only ones in flight)
      __syncthreads();      // ... from every thread; and the previous stage is multiplied
      if (s + 1 < stages) copy_stage(s + 1, cur ^ 1);
      unpack_stage(s, cur);
      __syncthreads();
      const uint8_t *xq = xq_s(cur);
      const float2 *xds = xds_s(cur);
#pragma unroll 1
      for (int bb = 0; bb < S; ++bb) {
        // Fragments by ldmatrix: A's matrices are (rows 0-7 | 8-15) x (bytes 0-15 | 16-31) of the
        // warp's 16-row group, B's (bytes 0-15 | 16-31) x (token groups j, j + 1).
        uint32_t b[4][2];
#pragma unroll
        for (int j = 0; j < 4; j += 2) {
          uint32_t t[4];
          ldmatrix_x4(t, xq + (wn * 32 + (j + lane / 16) * 8 + lane % 8) * L::kRowBytes + bb * 32 + 16 * ((lane / 8) & 1));
          b[j][0] = t[0], b[j][1] = t[1], b[j + 1][0] = t[2], b[j + 1][1] = t[3];
        }
        float2 ds[4][2];  // (d, s) of the tokens
#pragma unroll
        for (int j = 0; j < 4; ++j) ds[j][0] = xds[bb * kTileTokens + wn * 32 + j * 8 + tg * 2], ds[j][1] = xds[bb * kTileTokens + wn * 32 + j * 8 + tg * 2 + 1];
#pragma unroll
        for (int wi = 0; wi < kW; ++wi) {
          uint32_t a[kI][4];
#pragma unroll
          for (int i = 0; i < kI; ++i)
            ldmatrix_x4(a[i], wq_s(wi) + (wm * kWarpRows + i * 16 + lane % 8 + 8 * ((lane / 8) & 1)) * L::kRowBytes + bb * 32 + 16 * (lane / 16));
          const float *wd = wd_s(wi) + bb * kTileRows + wm * kWarpRows + g;
          float dw[kI][2];
#pragma unroll
          for (int i = 0; i < kI; ++i) dw[i][0] = wd[i * 16], dw[i][1] = wd[i * 16 + 8];
          float (&ac)[kI][4][4] = acc[wi];
#pragma unroll
          for (int i = 0; i < kI; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              int c[4];
              if (QB::kTwoScales) {  // the two 16-value halves have their own scales: a product each
                const uint32_t lo[4] = {a[i][0], a[i][1], 0u, 0u}, hi[4] = {0u, 0u, a[i][2], a[i][3]};
                int c2[4];
                mma_s8(c, lo, b[j]);
                mma_s8(c2, hi, b[j]);
                const float *wd2 = wd2_s(wi) + bb * kTileRows + wm * kWarpRows + g;
                const float dh0 = wd2[i * 16], dh1 = wd2[i * 16 + 8];
                ac[i][j][0] = fmaf(float(c[0]) * dw[i][0] + float(c2[0]) * dh0, ds[j][0].x, ac[i][j][0]);
                ac[i][j][1] = fmaf(float(c[1]) * dw[i][0] + float(c2[1]) * dh0, ds[j][1].x, ac[i][j][1]);
                ac[i][j][2] = fmaf(float(c[2]) * dw[i][1] + float(c2[2]) * dh1, ds[j][0].x, ac[i][j][2]);
                ac[i][j][3] = fmaf(float(c[3]) * dw[i][1] + float(c2[3]) * dh1, ds[j][1].x, ac[i][j][3]);
                continue;
              }
              mma_s8(c, a[i], b[j]);
              ac[i][j][0] = fmaf(float(c[0]) * ds[j][0].x, dw[i][0], ac[i][j][0]);
              ac[i][j][1] = fmaf(float(c[1]) * ds[j][1].x, dw[i][0], ac[i][j][1]);
              ac[i][j][2] = fmaf(float(c[2]) * ds[j][0].x, dw[i][1], ac[i][j][2]);
              ac[i][j][3] = fmaf(float(c[3]) * ds[j][1].x, dw[i][1], ac[i][j][3]);
              if (QB::kOffset) {  // + m_w * sum(x): a rank-one term per block
                const float *wmr = wm_s(wi) + bb * kTileRows + wm * kWarpRows + g;
                const float m0 = wmr[i * 16], m1 = wmr[i * 16 + 8];
                ac[i][j][0] = fmaf(m0, ds[j][0].y, ac[i][j][0]);
                ac[i][j][1] = fmaf(m0, ds[j][1].y, ac[i][j][1]);
                ac[i][j][2] = fmaf(m1, ds[j][0].y, ac[i][j][2]);
                ac[i][j][3] = fmaf(m1, ds[j][1].y, ac[i][j][3]);
              }
            }
        }
      }
    }
    // c0, c1: weight row g, tokens 2tg, 2tg+1; c2, c3: row g + 8.
    const int64_t m = rows_of_part();
    float *const y = pick(parts.y, tile_part);
    const float *const add = pick(parts.add, tile_part);
    const int add_broadcast = pick(parts.add_broadcast, tile_part);
#pragma unroll
    for (int i = 0; i < kI; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t row = row0 + wm * kWarpRows + i * 16 + g + (e >= 2 ? 8 : 0), tok = tok0 + wn * 32 + j * 8 + tg * 2 + (e & 1);
          if (row >= m || tok >= tokens) continue;
          if (kSwiGLU) {
            const float gv = acc[0][i][j][e];
            y[tok * m + row] = gv / (1.0f + expf(-gv)) * acc[kW - 1][i][j][e];
          } else {
            y[tok * m + row] = acc[0][i][j][e] + (add ? add[add_broadcast ? row : tok * m + row] : 0.0f);
          }
        }
    __syncthreads();  // shared memory is rewritten by the next tile
  }
}

template <class Block, int kTileRows, bool kSwiGLU = false>
cudaError_t launch_tiles(minfer_cuda_launch_cfg *cfg, const minfer_cuda_mmq_part *in, int n_parts, const void *xq, int64_t k,
                         int64_t tokens, int32_t dtype) {
  MmqParts parts{};
  int64_t row_tiles = 0;
  for (int i = 0; i < n_parts; ++i) {
    parts.w[i] = in[i].w, parts.y[i] = in[i].y, parts.add[i] = in[i].add, parts.m[i] = in[i].m;
    parts.add_broadcast[i] = in[i].add_broadcast;
    if (!kSwiGLU || i == 0) row_tiles += (in[i].m + kTileRows - 1) / kTileRows;  // SwiGLU: both weights' rows in one tile
    parts.tiles_end[i] = row_tiles;
  }
  for (int i = n_parts; i < kMinferCudaMmqMaxParts; ++i) parts.tiles_end[i] = row_tiles;
  parts.n = n_parts;
  const int64_t token_tiles = (tokens + kTileTokens - 1) / kTileTokens, tiles = row_tiles * token_tiles;
  constexpr int smem = MmqLayout<Block, kTileRows, kSwiGLU ? 2 : 1>::kBytes;
  if (smem > 48 * 1024) {  // above the default limit: opt in (per device, so every launch)
    const cudaError_t err = cudaFuncSetAttribute(mmq_kernel<Block, kTileRows, kSwiGLU>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
  }
  mmq_kernel<Block, kTileRows, kSwiGLU><<<unsigned(tiles < cfg->max_blocks ? tiles : cfg->max_blocks), kThreads, smem, cfg->stream>>>(
      parts, static_cast<const minfer_cuda_q8_act *>(xq), k, tokens, row_tiles, token_tiles);
  return launched(cfg,
                  kSwiGLU            ? "mmq_kernel (gate, up, swiglu; 64 x 64 tiles)"
                  : kTileRows == 64 ? "mmq_kernel (64 x 64 tiles)"
                                    : "mmq_kernel (128 x 64 tiles)",
                  dtype);
}

// Gate, up and SwiGLU in one launch: two weights' tiles in shared memory; only where three
// blocks still fit an SM (the 18- to 24-byte block types; Q8_0 and the K types would drop to
// one or two).
template <class Block>
constexpr bool kFusesSwiGLU = QBlock<Block>::kSubs == 1 && MmqLayout<Block, 64, 2>::kMinBlocks >= 3;

// 128-row tiles halve the copies and fragment loads per product, but only pay when there are
// enough of them to fill the GPU (two per SM on an H200) and three fit an SM: the K types'
// stages (a whole super-block) and Q8_0's 34-byte blocks need too much shared memory (0.5B
// Q8_0 pp512 51,663 -> 46,367 t/s with tall tiles), so they keep 64 rows.
template <class Block>
cudaError_t launch(minfer_cuda_launch_cfg *cfg, const minfer_cuda_mmq_part *parts, int n_parts, const void *xq, int64_t k, int64_t tokens,
                   int32_t dtype) {
  if constexpr (QBlock<Block>::kSubs == 1) {
    int64_t tall_tiles = 0;
    for (int i = 0; i < n_parts; ++i) tall_tiles += (parts[i].m + 127) / 128 * ((tokens + kTileTokens - 1) / kTileTokens);
    if (MmqLayout<Block, 128>::kMinBlocks >= 3 && tall_tiles >= 264) return launch_tiles<Block, 128>(cfg, parts, n_parts, xq, k, tokens, dtype);
  }
  return launch_tiles<Block, 64>(cfg, parts, n_parts, xq, k, tokens, dtype);
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" int minfer_cuda_mmq_supported(int32_t dtype) {
  return visit_int8_block(dtype, [](auto) {});
}

extern "C" int minfer_cuda_mmq_swiglu_supported(int32_t dtype) {
  bool fuses = false;
  visit_int8_block(dtype, [&](auto tag) { fuses = kFusesSwiGLU<decltype(tag)>; });
  return fuses;
}

namespace {
cudaError_t check_mmq_args(int32_t dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts, const void *xq, int64_t k) {
  if (k % minfer_dtype_info(dtype).block_values || n_parts < 1 || n_parts > kMinferCudaMmqMaxParts) return cudaErrorInvalidValue;
  // The stage copies read whole 4-byte words of the weights and 8-byte pieces of x.
  if (reinterpret_cast<uintptr_t>(xq) % 8) return cudaErrorMisalignedAddress;
  for (int i = 0; i < n_parts; ++i)
    if (reinterpret_cast<uintptr_t>(parts[i].w) % 4) return cudaErrorMisalignedAddress;
  return cudaSuccess;
}
}  // namespace

extern "C" cudaError_t minfer_cuda_mmq(minfer_cuda_launch_cfg *cfg, int32_t dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts,
                                       const void *xq, int64_t k, int64_t tokens) {
  if (const cudaError_t err = check_mmq_args(dtype, parts, n_parts, xq, k); err != cudaSuccess) return err;
  cudaError_t err = cudaErrorNotSupported;
  visit_int8_block(dtype, [&](auto tag) { err = launch<decltype(tag)>(cfg, parts, n_parts, xq, k, tokens, dtype); });
  return err;
}

extern "C" cudaError_t minfer_cuda_mmq_swiglu(minfer_cuda_launch_cfg *cfg, int32_t dtype, const void *gate, const void *up, const void *xq,
                                              float *y, int64_t k, int64_t m, int64_t tokens) {
  const minfer_cuda_mmq_part parts[2] = {{gate, y, nullptr, m, 0}, {up, y, nullptr, m, 0}};
  if (const cudaError_t err = check_mmq_args(dtype, parts, 2, xq, k); err != cudaSuccess) return err;
  cudaError_t err = cudaErrorNotSupported;
  visit_int8_block(dtype, [&](auto tag) {
    using Block = decltype(tag);
    if constexpr (kFusesSwiGLU<Block>) err = launch_tiles<Block, 64, true>(cfg, parts, 2, xq, k, tokens, dtype);
  });
  return err;
}
