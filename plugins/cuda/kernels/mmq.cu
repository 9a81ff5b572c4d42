// plugins/cuda/kernels/mmq.cu — prefill matmul on int8 tensor cores, reading the weights' blocks.
//
// y[t][o] = sum over 32-value sub-blocks b of dw[o][b] * dx[t][b] * (q_w[o][b] . q_x[t][b])
// (+ m_w[o][b] * sum x[t][b] for types with a minimum): the weights stay in their GGUF blocks
// (every type of qblock.cuh: no f16 copy) and the activations are quantized to 8 bits per 32
// values (mmvq.cu's quantize kernel, in runs of four blocks: minfer_cuda_q8_act4). A
// 128-thread block makes a 64 x 64 tile of y (weight rows x tokens), or 128 x 64; each warp
// 32 x 32 (64 x 32) from mma.m16n8k32 s8 products. One product covers exactly one sub-block
// on each side, so its int32 result is scaled by the two sides' scales into f32 accumulators
// right away, in registers (Q6_K, scaled per 16 values, takes two products). plan_mmq picks
// the tile height and split-K per launch.
//
// Per stage, 4 sub-blocks of k (128 values; a whole super-block, 8 sub-blocks, for the K types)
// of the tile's weight rows and 64 tokens are copied into shared memory by cp.async (the
// tokens as 16-byte pieces, the weights as 8-byte pieces or 4-byte words) and double-buffered:
// the next stage is in flight while this one is unpacked and multiplied. The weights arrive
// as their raw blocks and are unpacked to bytes (qblock.cuh) in shared memory; the tokens'
// quantized values land straight in rows padded so the fragment loads (ldmatrix) of the 8 row
// groups fall in distinct banks.
#include <cuda_fp16.h>

#include <algorithm>

#include "async_copy.cuh"
#include "glu.cuh"
#include "grid.cuh"
#include "ldmatrix.cuh"
#include "mma_s8.cuh"
#include "minfer/blocks.h"
#include "minfer/dtype.h"
#include "mmq_parts.cuh"
#include "q8_act.cuh"
#include "qblock.cuh"


namespace minfer::cuda {
namespace {

constexpr int kTileTokens = 64, kThreads = 128;

// The unpack's pairing of sub-blocks (unpack_stage), for the one-block-per-sub-block types:
// the first distance (1 or 2 blocks) that is an odd number of words; 0: none (Q5_1, the K types).
template <class Block>
constexpr int kUnpackPairDist = QBlock<Block>::kSubs != 1 ? 0 : sizeof(Block) % 8 == 4 ? 1 : sizeof(Block) % 4 == 2 ? 2 : 0;

// The shared memory of one block, per weight type, tile height and weights per tile (two for
// a gate and an up weight with their activation); dynamic: over 48 KiB for most.
template <class Block, int kTileRows, int kW = 1>
struct MmqLayout {
  using QB = QBlock<Block>;
  static constexpr int kStageSubs = QB::kSubs == 1 ? 4 : QB::kSubs;  // sub-blocks of k per stage
  static constexpr int kStageBlocks = kStageSubs / QB::kSubs;         // weight blocks of a row per stage
  static constexpr int kSpan = kStageBlocks * int(sizeof(Block));     // a row's bytes per stage
  // The span is copied in 4-byte words from the aligned word below it: blocks are only 2-byte
  // aligned (18, 22, 34, 210 bytes), so it may start 2 bytes into its first word.
  static constexpr int kWords = (kSpan + 2 + 3) / 4;
  // An odd number of 8-byte pieces (8-byte copies need 8-byte rows): the unpack's lanes, on
  // consecutive rows at one offset, meet at most two to a bank.
  static constexpr int kRawPieces = (kWords * 4 + 7) / 8;
  static constexpr int kRawStride = (kRawPieces % 2 ? kRawPieces : kRawPieces + 1) * 8;
  static constexpr int kRowBytes = kStageSubs * 32 + 16;  // an unpacked row, padded
  static constexpr int kScales = kStageSubs * kTileRows * 4;
  // A token's (d, s) pairs of a stage, padded by 16 bytes: the fragment rows' 8 tokens read
  // distinct banks (and the copies stay 16-byte aligned).
  static constexpr int kDsStride = kStageSubs * 8 + 16;
  static constexpr int kWq = 0;                                            // int8 [weights][rows][kRowBytes]
  static constexpr int kXq = kWq + kW * kTileRows * kRowBytes;             // int8 [2][tokens][kRowBytes]
  static constexpr int kXds = kXq + 2 * kTileTokens * kRowBytes;           // float2 (d, s) [2][tokens][kDsStride]
  static constexpr int kWd = kXds + 2 * kTileTokens * kDsStride;           // float [weights][subs][rows]
  static constexpr int kWd2 = kWd + kW * kScales;                          // Q6_K: values 16..31
  static constexpr int kWm = kWd2 + (QB::kTwoScales ? kW * kScales : 0);   // minima
  static constexpr int kRaw = kWm + (QB::kOffset ? kW * kScales : 0);      // raw blocks [2][weights][rows][kRawStride]
  static constexpr int kBytes = kRaw + 2 * kW * kTileRows * kRawStride;
  // Blocks per SM that shared memory allows (of 227 KiB), at most 4 (3 for a tall tile or two
  // weights): the registers' bound.
  static constexpr int kMostBlocks = kTileRows == 64 && kW == 1 ? 4 : 3;
  static constexpr int kMinBlocks = 227 * 1024 / kBytes < kMostBlocks ? 227 * 1024 / kBytes : kMostBlocks;
};

__global__ void mmq_split_sum_kernel(const __grid_constant__ MmqParts parts) {
  wait_for_inputs();
  MINFER_GRID_STRIDE(i, parts.partial_stride) {
    const int p = i < parts.partial_off[1] ? 0 : i < parts.partial_off[2] ? 1 : 2;
    const int64_t at = i - pick(parts.partial_off, p), m = pick(parts.m, p);
    float v = 0.0f;
    for (int z = 0; z < parts.splits; ++z) v += parts.partials[z * parts.partial_stride + i];
    const float *add = pick(parts.add, p);
    if (add) v += add[pick(parts.add_broadcast, p) ? at % m : at];
    pick(parts.y, p)[at] = v;
  }
}

// kGated: parts are a gate (0) and an up weight (1) of the same shape; a tile makes both
// products of its rows and writes act(gate) * up to part 0's y (no add).
template <class Block, int kTileRows, bool kGated>
__global__ void __launch_bounds__(kThreads, MmqLayout<Block, kTileRows, kGated ? 2 : 1>::kMinBlocks)
    mmq_kernel(const __grid_constant__ MmqParts parts, const minfer_cuda_q8_act4 *x, int64_t k, int64_t tokens, int64_t row_tiles,
               int64_t token_tiles, int64_t group_tiles) {
  wait_for_inputs();
  using QB = QBlock<Block>;
  constexpr int kW = kGated ? 2 : 1;  // weights per tile
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
  const auto xds_s = [&](int buf) { return smem + L::kXds + buf * kTileTokens * L::kDsStride; };
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tg = lane % 4;
  const int wm = warp / 2, wn = warp % 2;  // this warp's part of the tile
  const int64_t kb = k / 32, stages = (kb + S - 1) / S, row_bytes = kb / QB::kSubs * int64_t(sizeof(Block));
  const int64_t x_runs = (kb + 3) / 4;  // a token's runs of four blocks
  static_assert(S % 4 == 0, "a stage is whole runs of four blocks of x");
  const int splits = parts.splits;
  for (int64_t unit = blockIdx.x; unit < row_tiles * token_tiles * splits; unit += gridDim.x) {
    const int64_t tile = unit / splits;
    const int split = int(unit - tile * splits);
    const int64_t s_begin = stages * split / splits, s_end = stages * (split + 1) / splits;
    const TileAt at = tile_at(tile, row_tiles, token_tiles, group_tiles);
    const int64_t row_tile = at.row_tile, tok0 = at.token_tile * kTileTokens;
    // The tile's part, kept in shared memory: in registers through the stage loop its rows
    // and weights cost the tall tile its spill-free register budget.
    __shared__ int tile_part;
    if (threadIdx.x == 0) tile_part = row_tile < parts.tiles_end[0] ? 0 : row_tile < parts.tiles_end[1] ? 1 : 2;
    __syncthreads();
    const int64_t row0 = (row_tile - (tile_part == 0 ? 0 : pick(parts.tiles_end, tile_part - 1))) * kTileRows;
    const auto rows_of_part = [&] { return pick(parts.m, tile_part); };
    float acc[kW][kI][4][4] = {};
    // Stage s into buffer `buf`. Weights whose rows are 8-byte multiples go as 8-byte pieces
    // over all threads; others by 4-byte words: warp w copies rows w, w + 4, ..., its lanes
    // consecutive words of one row's span from the word below it (so each copy instruction
    // reads whole sectors; rows 4 apart share the span's alignment, so a lane's source only
    // steps by 4 rows). Interior stages of whole tiles copy without bounds checks; the last
    // stage and partial tiles clip at the row's end and zero-fill rows and tokens past the
    // matrix.
    const auto copy_stage = [&](int64_t s, int buf) {
      const int64_t m = rows_of_part();
      const bool interior = s + 1 < stages;
#pragma unroll
      for (int wi = 0; wi < kW; ++wi) {
        const uint8_t *const wbytes = static_cast<const uint8_t *>(pick(parts.w, kGated ? wi : tile_part));
        if (L::kSpan % 8 == 0 && parts.copy8) {
          // 8-byte pieces spread over all threads, consecutive threads on consecutive pieces:
          // four times fewer copy instructions than the words below.
          constexpr int kPieces = L::kSpan / 8;
          const bool whole = interior && row0 + kTileRows <= m;
#pragma unroll
          for (int i = 0; i < (kTileRows * kPieces + kThreads - 1) / kThreads; ++i) {
            const int c = threadIdx.x + i * kThreads, rr = c / kPieces, piece = c % kPieces;
            if (c >= kTileRows * kPieces) break;
            const int64_t at = s * L::kSpan + 8 * piece;  // the piece's offset in its row
            int valid = 8;
            if (!whole) {
              const int64_t rest = row0 + rr < m ? row_bytes - at : 0;
              valid = rest <= 0 ? 0 : rest >= 8 ? 8 : int(rest);
            }
            cp_async_zfill<8>(raw_s(buf, wi) + rr * L::kRawStride + 8 * piece, valid ? wbytes + (row0 + rr) * row_bytes + at : wbytes, valid);
          }
          continue;
        }
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
      // The tokens: the stage's kG runs of four blocks of each token, ten 16-byte pieces a run
      // (two of scales, eight of values) into the token's scale row and value row. Thread i
      // takes scale pieces i, i + 128, ... and value pieces likewise: in both, one piece per
      // thread a round, the warp's pieces consecutive in memory, the piece within the token's
      // stage fixed per thread (128 is a multiple of its pieces per token).
      constexpr int kG = S / 4, kScalePieces = 2 * kG, kValuePieces = 8 * kG;
      const int64_t run0 = s * kG;
#pragma unroll
      for (int i = 0; i < kScalePieces * kTileTokens / kThreads; ++i) {
        const int c = threadIdx.x + i * kThreads, t = c / kScalePieces, r = c % kScalePieces;
        const bool live = tok0 + t < tokens;
        const auto *src = reinterpret_cast<const uint8_t *>(x + (tok0 + t) * x_runs + run0 + r / 2) + 16 * (r % 2);
        cp_async16_zfill(xds_s(buf) + t * L::kDsStride + 16 * r, live ? src : reinterpret_cast<const uint8_t *>(x), live ? 16 : 0);
      }
#pragma unroll
      for (int i = 0; i < kValuePieces * kTileTokens / kThreads; ++i) {
        const int c = threadIdx.x + i * kThreads, t = c / kValuePieces, r = c % kValuePieces;
        const bool live = tok0 + t < tokens;
        const auto *src = reinterpret_cast<const uint8_t *>(x + (tok0 + t) * x_runs + run0 + r / 8) + 32 + 16 * (r % 8);
        cp_async16_zfill(xq_s(buf) + t * L::kRowBytes + 16 * r, live ? src : reinterpret_cast<const uint8_t *>(x), live ? 16 : 0);
      }
    };
    // The weights of the stage in buffer `buf` to bytes and scales.
    const auto unpack_stage = [&](int64_t s, int buf) {
#pragma unroll
      for (int wi = 0; wi < kW; ++wi)
#pragma unroll
        for (int it = 0; it < kTileRows * S / kThreads; ++it) {
          const uint8_t *raw = raw_s(buf, wi);
          int rr, sb;
          if constexpr (kUnpackPairDist<Block> > 0) {
            // Half-warps on the same 16 rows, sub-blocks kPairDist apart: an odd number of words
            // between their reads puts them on the banks the other half leaves free (rows
            // alone, 8-byte strides, meet two to a bank).
            const int c = warp + 4 * it, groups = kTileRows / 16, q = c / groups;
            rr = (c % groups) * 16 + lane % 16;
            sb = (kUnpackPairDist<Block> == 2 ? q : 2 * q) + (lane / 16) * kUnpackPairDist<Block>;
          } else {
            const int p = threadIdx.x + it * kThreads;
            rr = p % kTileRows, sb = p / kTileRows;  // lanes: consecutive rows
          }
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
    copy_stage(s_begin, 0);
    for (int64_t s = s_begin; s < s_end; ++s) {
      const int cur = int((s - s_begin) & 1);
      cp_async_wait_all();  // this stage's copies (the only ones in flight)
      __syncthreads();      // ... from every thread; and the previous stage is multiplied
      if (s + 1 < s_end) copy_stage(s + 1, cur ^ 1);
      unpack_stage(s, cur);
      __syncthreads();
      const uint8_t *xq = xq_s(cur);
      const uint8_t *xds = xds_s(cur);
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
        for (int j = 0; j < 4; ++j) {
          const uint8_t *d0 = xds + (wn * 32 + j * 8 + tg * 2) * L::kDsStride + bb * 8;
          ds[j][0] = *reinterpret_cast<const float2 *>(d0), ds[j][1] = *reinterpret_cast<const float2 *>(d0 + L::kDsStride);
        }
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
    // A split's partial sums go to its own copy of the parts' outputs; mmq_split_sum_kernel adds them.
    float *const y = splits > 1 ? parts.partials + split * parts.partial_stride + pick(parts.partial_off, tile_part) : pick(parts.y, tile_part);
    const float *const add = splits > 1 ? nullptr : pick(parts.add, tile_part);
    const int add_broadcast = pick(parts.add_broadcast, tile_part);
#pragma unroll
    for (int i = 0; i < kI; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t row = row0 + wm * kWarpRows + i * 16 + g + (e >= 2 ? 8 : 0), tok = tok0 + wn * 32 + j * 8 + tg * 2 + (e & 1);
          if (row >= m || tok >= tokens) continue;
          if (kGated) {
            y[tok * m + row] = glu(parts.act, acc[0][i][j][e], acc[kW - 1][i][j][e]);
          } else {
            y[tok * m + row] = acc[0][i][j][e] + (add ? add[add_broadcast ? row : tok * m + row] : 0.0f);
          }
        }
    __syncthreads();  // shared memory is rewritten by the next tile
  }
}

// Gate, up and their activation in one launch: two weights' tiles in shared memory; only where three
// blocks still fit an SM (the 18- to 24-byte block types; Q8_0 and the K types would drop to
// one or two).
template <class Block>
constexpr bool kFusesGlu = QBlock<Block>::kSubs == 1 && MmqLayout<Block, 64, 2>::kMinBlocks >= 3;

// 128-row tiles halve the copies and fragment loads per product, but only where three fit an
// SM: the K types' stages (a whole super-block) and Q8_0's 34-byte blocks need too much
// shared memory (0.5B Q8_0 pp512 51,663 -> 46,367 t/s with tall tiles), so they keep 64 rows.
template <class Block>
constexpr bool kTallTiles = QBlock<Block>::kSubs == 1 && MmqLayout<Block, 128>::kMinBlocks >= 3;

constexpr int kMaxSplits = 8, kMinSplitStages = 4;

struct MmqPlan {
  int tile_rows = 64, splits = 1;
};

// Tile height and split-K for a launch (plan_splits' wave model), each stage's time the SM's
// work per stage (tile rows x blocks per SM: the kernel is issue-bound). A few tiles for 132
// SMs (a 7B's down projection at 512 tokens: 448 64-row tiles, 0.85 of a wave) leave SMs
// idle; splitting k fills them.
template <class Block>
MmqPlan plan_mmq(const minfer_cuda_mmq_part *parts, int n_parts, int64_t k, int64_t tokens, int sm_count, bool can_split) {
  const int64_t token_tiles = (tokens + kTileTokens - 1) / kTileTokens;
  const int64_t stages = (k / 32 + MmqLayout<Block, 64>::kStageSubs - 1) / MmqLayout<Block, 64>::kStageSubs;
  MmqPlan best;
  double best_cost = 0;
  const auto consider = [&](int rows, int blocks_per_sm, double stage_work) {
    int64_t tiles = 0;
    for (int i = 0; i < n_parts; ++i) tiles += (parts[i].m + rows - 1) / rows * token_tiles;
    const SplitPlan sp = plan_splits(tiles, stages, int64_t(sm_count > 0 ? sm_count : 1) * blocks_per_sm, can_split, kMaxSplits, kMinSplitStages);
    const double cost = sp.cost * stage_work;
    if (best_cost == 0 || cost < best_cost) best_cost = cost, best = {rows, sp.splits};
  };
  consider(64, MmqLayout<Block, 64>::kMinBlocks, 64.0 * MmqLayout<Block, 64>::kMinBlocks);
  // Tall tiles a little ahead at equal work: fewer fragment loads per product.
  if constexpr (kTallTiles<Block>) consider(128, MmqLayout<Block, 128>::kMinBlocks, 0.95 * 128.0 * MmqLayout<Block, 128>::kMinBlocks);
  return best;
}


template <class Block, int kTileRows, bool kGated = false>
cudaError_t launch_tiles(minfer_cuda_launch_cfg *cfg, const minfer_cuda_mmq_part *in, int n_parts, const void *xq, int64_t k,
                         int64_t tokens, int32_t dtype, int splits = 1, const minfer_cuda_mmq_split *split = nullptr,
                         int32_t act = MINFER_CUDA_GLU_SILU) {
  MmqParts parts = make_mmq_parts(in, n_parts, kTileRows, kGated, tokens, splits, split ? split->partials : nullptr, act);
  const int64_t row_tiles = parts.tiles_end[kMinferCudaMmqMaxParts - 1];
  const int64_t row_bytes = k / (32 * QBlock<Block>::kSubs) * int64_t(sizeof(Block));
  parts.copy8 = row_bytes % 8 == 0;
  for (int i = 0; i < n_parts; ++i) parts.copy8 &= reinterpret_cast<uintptr_t>(in[i].w) % 8 == 0;
  const int64_t token_tiles = (tokens + kTileTokens - 1) / kTileTokens, units = row_tiles * token_tiles * splits;
  // Token tiles per group (see the kernel): as many as keep their activations within ~16 MiB
  // of the L2 (minfer_cuda_q8_act4: 160 bytes per 128 values).
  const int64_t tile_x_bytes = kTileTokens * ((k / 32 + 3) / 4) * int64_t(sizeof(minfer_cuda_q8_act4));
  const int64_t group_tiles = std::max<int64_t>(1, std::min<int64_t>(token_tiles, (int64_t(16) << 20) / tile_x_bytes));
  constexpr int smem = MmqLayout<Block, kTileRows, kGated ? 2 : 1>::kBytes;
  // Above the default 48 KiB with the kernel's few static bytes: opt in (per device, so every launch).
  if (smem + 1024 > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(mmq_kernel<Block, kTileRows, kGated>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
  }
  launch_kernel(cfg, mmq_kernel<Block, kTileRows, kGated>, unsigned(units < cfg->max_blocks ? units : cfg->max_blocks), kThreads, smem,
      parts, static_cast<const minfer_cuda_q8_act4 *>(xq), k, tokens, row_tiles, token_tiles, group_tiles);
  if (splits > 1) {
    if (const cudaError_t err = launched(cfg, "mmq_kernel (split k)", dtype); err != cudaSuccess) return err;
    return launch_mmq_split_sum(cfg, parts, tokens, dtype);
  }
  return launched(cfg,
                  kGated             ? (act == MINFER_CUDA_GLU_GELU ? "mmq_kernel (gate, up, gelu; 64 x 64 tiles)" : "mmq_kernel (gate, up, silu; 64 x 64 tiles)")
                  : kTileRows == 64 ? "mmq_kernel (64 x 64 tiles)"
                                    : "mmq_kernel (128 x 64 tiles)",
                  dtype);
}

template <class Block>
cudaError_t launch(minfer_cuda_launch_cfg *cfg, const minfer_cuda_mmq_part *parts, int n_parts, const void *xq, int64_t k, int64_t tokens,
                   int32_t dtype, const minfer_cuda_mmq_split *split) {
  const MmqPlan plan = plan_mmq<Block>(parts, n_parts, k, tokens, split ? split->sm_count : 0, split && split->partials);
  if constexpr (kTallTiles<Block>)
    if (plan.tile_rows == 128) return launch_tiles<Block, 128>(cfg, parts, n_parts, xq, k, tokens, dtype, plan.splits, split);
  return launch_tiles<Block, 64>(cfg, parts, n_parts, xq, k, tokens, dtype, plan.splits, split);
}

}  // namespace

cudaError_t launch_mmq_split_sum(minfer_cuda_launch_cfg *cfg, const MmqParts &parts, int64_t, int32_t dtype) {
  launch_kernel(cfg, mmq_split_sum_kernel, grid_for(cfg, parts.partial_stride), kBlock, 0, parts);
  return launched(cfg, "mmq_split_sum_kernel", dtype);
}

}  // namespace minfer::cuda

using namespace minfer::cuda;

// Q2_K's minima per 16 values need each half's activation sum, and MMQ's x tiles keep one
// sum per 32 values: its prompts take the f16 GEMM.
template <class Block>
constexpr bool kMmqReads = !kTwoOffsets<Block>;

extern "C" int minfer_cuda_mmq_supported(int32_t dtype) {
  bool reads = false;
  visit_int8_block(dtype, [&](auto tag) { reads = kMmqReads<decltype(tag)>; });
  return reads;
}

extern "C" int minfer_cuda_mmq_glu_supported(int32_t dtype) {
  bool fuses = false;
  visit_int8_block(dtype, [&](auto tag) { fuses = kFusesGlu<decltype(tag)>; });
  return fuses;
}

namespace {
cudaError_t check_mmq_args(int32_t dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts, const void *xq, int64_t k) {
  if (k % minfer_dtype_info(dtype).block_values || n_parts < 1 || n_parts > kMinferCudaMmqMaxParts) return cudaErrorInvalidValue;
  // The stage copies read whole 4-byte words of the weights and 16-byte pieces of x.
  if (reinterpret_cast<uintptr_t>(xq) % 16) return cudaErrorMisalignedAddress;
  for (int i = 0; i < n_parts; ++i)
    if (reinterpret_cast<uintptr_t>(parts[i].w) % 4) return cudaErrorMisalignedAddress;
  return cudaSuccess;
}
}  // namespace

extern "C" size_t minfer_cuda_mmq_partials_bytes(int32_t dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts, int64_t k, int64_t tokens,
                                                 int32_t sm_count) {
  size_t bytes = 0;
  visit_int8_block(dtype, [&](auto tag) {
    if constexpr (!kMmqReads<decltype(tag)>) return;
    bytes = mmq_partials_bytes(parts, n_parts, tokens, plan_mmq<decltype(tag)>(parts, n_parts, k, tokens, sm_count, true).splits);
  });
  return bytes;
}

extern "C" cudaError_t minfer_cuda_mmq(minfer_cuda_launch_cfg *cfg, int32_t dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts,
                                       const void *xq, int64_t k, int64_t tokens, const minfer_cuda_mmq_split *split) {
  if (const cudaError_t err = check_mmq_args(dtype, parts, n_parts, xq, k); err != cudaSuccess) return err;
  cudaError_t err = cudaErrorNotSupported;
  visit_int8_block(dtype, [&](auto tag) {
    if constexpr (kMmqReads<decltype(tag)>) err = launch<decltype(tag)>(cfg, parts, n_parts, xq, k, tokens, dtype, split);
  });
  return err;
}

extern "C" cudaError_t minfer_cuda_mmq_glu(minfer_cuda_launch_cfg *cfg, int32_t dtype, int32_t act, const void *gate, const void *up,
                                           const void *xq, float *y, int64_t k, int64_t m, int64_t tokens) {
  const minfer_cuda_mmq_part parts[2] = {{gate, y, nullptr, m, 0}, {up, y, nullptr, m, 0}};
  if (const cudaError_t err = check_mmq_args(dtype, parts, 2, xq, k); err != cudaSuccess) return err;
  cudaError_t err = cudaErrorNotSupported;
  visit_int8_block(dtype, [&](auto tag) {
    using Block = decltype(tag);
    if constexpr (kFusesGlu<Block>) err = launch_tiles<Block, 64, true>(cfg, parts, 2, xq, k, tokens, dtype, 1, nullptr, act);
  });
  return err;
}
