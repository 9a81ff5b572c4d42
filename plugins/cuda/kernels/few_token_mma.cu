// plugins/cuda/kernels/few_token_mma.cu — matmul for a few tokens (2..64: batched decode
// steps) on int8 tensor cores: y[t] = W x[t] with Q4_0 weights, x quantized as for MMQ.
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
// 22 at 16, 30 at 32, 57-64 at 64 (MMQ: 66-80 throughout).
//
// Both sides come through shared memory by cp.async in 16-byte pieces, eight blocks of k (256
// values: 144 bytes of a Q4_0 row, two MMQ runs of a token) a stage, several stages in flight.
// A row's 144 bytes are 36 words: the eight rows a warp reads at once fall on distinct banks
// at every word; a token's stage is 320 bytes kept 336 apart for the same reason. A warp
// makes 32 rows (two m16 tiles; gated 16 gate rows and the same 16 up rows) x all tokens over
// its share of the work: stream-K (first_item) keeps every block of the one wave busy to the
// end, whatever the rows. Rows must be whole 16-byte pieces: k a multiple of 256.
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "async_copy.cuh"
#include "glu.cuh"
#include "grid.cuh"
#include "mma_s8.cuh"
#include "minfer/blocks.h"
#include "minfer/dtype.h"
#include "q8_act.cuh"

namespace minfer::cuda {
namespace {

constexpr int kWarps = 4;                           // per block
constexpr int kRowTiles = 2;                        // m16 tiles of weight rows per warp
constexpr int kWarpRows = 16 * kRowTiles;           // 32
constexpr int kBlockRows = kWarps * kWarpRows;      // 128 (64 part rows gated)
constexpr int kStageBlocks = 8;                     // blocks of k per stage
constexpr int kWRowBytes = kStageBlocks * int(sizeof(minfer_block_q4_0));  // 144: nine 16-byte pieces
constexpr int kXRunBytes = int(sizeof(minfer_cuda_q8_act4));               // 160: four blocks of a token
constexpr int kXStageBytes = 2 * kXRunBytes, kXStride = kXStageBytes + 16; // 320 in 336
constexpr int kMaxTiles = 8;                        // token tiles of 8: 64 tokens at most
constexpr int kMinBlocks = 2;                       // blocks per SM the registers must allow
constexpr int kParts = 3;
static_assert(kWRowBytes % 16 == 0 && (kWRowBytes / 4) % 8 == 4, "rows g of a warp's read on distinct banks");
static_assert((kXStride / 4) % 8 == 4, "tokens g of a warp's read on distinct banks");

// Stages in the pipeline: two blocks an SM, each with two or three stages (36-54 KiB of
// weights) in flight while it works on one. Measured (H200, 7B gate at 4 and 16 tokens):
// three stages at three blocks an SM were 4-25% slower.
constexpr int stages_for(int tiles) { return tiles <= 2 ? 4 : tiles <= 4 ? 3 : 2; }
constexpr size_t stage_bytes(int tiles) { return size_t(kBlockRows) * kWRowBytes + size_t(8 * tiles) * kXStride; }
constexpr size_t smem_bytes(int tiles) { return stages_for(tiles) * stage_bytes(tiles); }

struct FewParts {
  const void *w[kParts];
  float *y[kParts];
  const float *add[kParts];  // NULL, or added: per row (add_broadcast) or per value
  int64_t m[kParts], blocks_end[kParts];  // part p's row blocks are [blocks_end[p-1], blocks_end[p])
  int add_broadcast[kParts];
  const void *up;  // gated (one part, the gate): y = act(gate x) * (up x)
  int act;         // MINFER_CUDA_GLU_*
  float *partials;  // two slots a block of kBlockRows x tokens sums (see first_item)
};

template <class T>
__device__ __forceinline__ T pick(const T (&a)[kParts], int p) {
  return p == 0 ? a[0] : p == 1 ? a[1] : a[2];
}

// Row block rb's part, its rows and its first part row.
struct RowBlock {
  int p;
  int64_t m, base;
};
template <bool kGated>
__device__ __forceinline__ RowBlock row_block(const FewParts &parts, int64_t rb) {
  const int p = rb < parts.blocks_end[0] ? 0 : rb < parts.blocks_end[1] ? 1 : 2;
  return {p, pick(parts.m, p), (rb - (p == 0 ? 0 : pick(parts.blocks_end, p - 1))) * (kGated ? kBlockRows / 2 : kBlockRows)};
}

// Stream-K: the work is (row block, stage) items, rb * stages + s, cut evenly over the grid:
// block c takes [first_item(c), first_item(c + 1)). A row block inside one block's range is
// written out by it; one cut by a range's ends leaves partial sums in the slots of the blocks
// that share it (slot 0 when the row block is where that block's range starts, else slot 1),
// which few_token_sum_kernel adds up in block order: the same result every run. Only the block
// whose range holds a cut row block's start (c0) sums it.
__host__ __device__ __forceinline__ int64_t first_item(int64_t c, int64_t total, int64_t grid) { return c * total / grid; }
__device__ __forceinline__ int64_t block_of_item(int64_t i, int64_t total, int64_t grid) { return ((i + 1) * grid - 1) / total; }

// Shared row lr of a block (0..127) is warp lr / 32's row lr % 32: part row base + lr
// (gated: rows 0..15 of a warp are the gate's part rows base + 16 (lr / 32) + lr % 32, 16..31
// the same rows of up).
template <bool kGated>
__device__ __forceinline__ int64_t part_row(int64_t base, int lr) {
  return kGated ? base + 16 * (lr >> 5) + (lr & 15) : base + lr;
}

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

template <int kTiles, bool kGated>
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
  const auto clear = [&] {
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int r = 0; r < kRowTiles; ++r) acc[t][r][0] = acc[t][r][1] = acc[t][r][2] = acc[t][r][3] = 0.0f;
  };
  // acc[t][r][i]: shared row 32 warp + 16 r + g + 8 (i / 2), token 8 t + 2 q + i % 2.
  const auto flush = [&](int64_t rb, bool whole, int slot) {
    if (!whole) {
      float *out = parts.partials + (2 * int64_t(blockIdx.x) + slot) * kBlockRows * tokens;
#pragma unroll
      for (int t = 0; t < kTiles; ++t)
#pragma unroll
        for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int64_t tok = 8 * t + 2 * q + (i & 1);
            if (tok < tokens) out[tok * kBlockRows + warp * kWarpRows + 16 * r + g + 8 * (i >> 1)] = acc[t][r][i];
          }
      return;
    }
    const RowBlock b = row_block<kGated>(parts, rb);
    float *const y = pick(parts.y, b.p);
    const float *const add = pick(parts.add, b.p);
    const bool bcast = pick(parts.add_broadcast, b.p) != 0;
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int r = 0; r < (kGated ? 1 : kRowTiles); ++r)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int64_t tok = 8 * t + 2 * q + (i & 1), o = part_row<kGated>(b.base, warp * kWarpRows + 16 * r + g + 8 * (i >> 1));
          if (tok >= tokens || o >= b.m) continue;
          float v = acc[t][r][i];
          if (kGated) v = glu(parts.act, v, acc[t][1][i]);
          const int64_t at = tok * b.m + o;
          y[at] = add ? v + add[bcast ? o : at] : v;
        }
  };

#pragma unroll
  for (int b = 0; b < kStages - 1; ++b) issue(b);
  clear();
  for (int64_t ic = i0; ic < i1; ++ic) {
    const int n = int((ic - i0) % kStages);
    cp_async_wait<kStages - 2>();
    __syncthreads();  // item ic is in; everyone is done with the buffer refilled next
    issue((n + kStages - 1) % kStages);
    const auto *wrows = reinterpret_cast<const uint32_t *>(wsm(n) + warp * kWarpRows * kWRowBytes);
    const uint8_t *xs = xsm(n);
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
    const int64_t rb = ic / stages, s = ic - rb * stages;
    if (s == stages - 1 || ic == i1 - 1) {  // the end of this block's part of row block rb
      const int64_t seg0 = rb * stages > i0 ? rb * stages : i0;
      flush(rb, seg0 == rb * stages && s == stages - 1, seg0 == i0 ? 0 : 1);
      clear();
    }
  }
  cp_async_wait<0>();
}

// The row blocks that stream-K cut, each summed by the blocks of grid column c0 (the block whose
// range holds its start; only that one's does): a thread per four output rows of a token,
// kSumThreads / quads tokens a block. y = the partial sums of c0..c1 in block order, plus the
// add (gated: act(gate) * up of the summed gate and up rows). The loads of four blocks' sums
// are in flight at once. Measured (H200, 7B Q4_0, 64 sequences): the kernel it replaced, a
// block per row block and token that mostly had nothing to add, took ~1.1 ms of a ~9 ms step.
constexpr int kSumThreads = 256;
template <bool kGated>
constexpr int sum_quads() { return kGated ? kBlockRows / 8 : kBlockRows / 4; }  // a token's quads of output rows
template <bool kGated>
constexpr int sum_tokens() { return kSumThreads / sum_quads<kGated>(); }

template <bool kGated>
__global__ void __launch_bounds__(kSumThreads) few_token_sum_kernel(const __grid_constant__ FewParts parts, int64_t tokens, int64_t stages) {
  wait_for_inputs();
  const int64_t grid = gridDim.x, c0 = blockIdx.x, total = parts.blocks_end[kParts - 1] * stages;
  const int64_t i_beg = first_item(c0, total, grid), i_end = first_item(c0 + 1, total, grid), rb = (i_end - 1) / stages;
  if (i_end % stages == 0 || i_beg > rb * stages) return;  // no row block cut at this range's end, or its start is an earlier block's
  constexpr int kQuads = sum_quads<kGated>();
  const int64_t tok = int64_t(blockIdx.y) * sum_tokens<kGated>() + threadIdx.x / kQuads;
  if (tok >= tokens) return;
  const int quad = threadIdx.x % kQuads, lr = kGated ? 32 * (quad >> 2) + 4 * (quad & 3) : 4 * quad;  // gated: the gate's rows, up's 16 on
  const int64_t c1 = block_of_item(rb * stages + stages - 1, total, grid), slot = int64_t(kBlockRows) * tokens, at = tok * kBlockRows + lr;
  const auto load = [&](int64_t c, int s, int off) { return *reinterpret_cast<const float4 *>(parts.partials + (2 * c + s) * slot + at + off); };
  const auto add4 = [](float4 &a, const float4 &b) { a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w; };
  float4 v = load(c0, i_beg < rb * stages ? 1 : 0, 0), u = kGated ? load(c0, i_beg < rb * stages ? 1 : 0, 16) : float4{};
  for (int64_t c = c0 + 1; c <= c1; c += 4) {  // slot 0 of the later blocks: the row block starts their ranges
    float4 w[4], w_up[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (c + j <= c1) {
        w[j] = load(c + j, 0, 0);
        if (kGated) w_up[j] = load(c + j, 0, 16);
      }
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (c + j <= c1) {
        add4(v, w[j]);
        if (kGated) add4(u, w_up[j]);
      }
  }
  const RowBlock b = row_block<kGated>(parts, rb);
  float *const y = pick(parts.y, b.p);
  const float *const add = pick(parts.add, b.p);
  const bool bcast = pick(parts.add_broadcast, b.p) != 0;
  const float vs[4] = {v.x, v.y, v.z, v.w}, us[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t o = part_row<kGated>(b.base, lr + j);
    if (o >= b.m) break;
    const float r = kGated ? glu(parts.act, vs[j], us[j]) : vs[j];
    const int64_t y_at = tok * b.m + o;
    y[y_at] = add ? r + add[bcast ? o : y_at] : r;
  }
}

int token_tiles(int64_t tokens) { return tokens <= 8 ? 1 : tokens <= 16 ? 2 : tokens <= 32 ? 4 : 8; }

// Blocks of this kernel an SM holds (its shared memory decides), asked once per instantiation.
template <int kTiles, bool kGated>
int blocks_per_sm() {
  static const int n = [] {
    auto *kernel = few_token_mma_kernel<kTiles, kGated>;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes(kTiles))) != cudaSuccess) return 0;
    int blocks = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kWarps * 32, smem_bytes(kTiles)) != cudaSuccess) return 0;
    return blocks;
  }();
  return n;
}

template <int T, bool G>
struct Shape {
  static constexpr int kTiles = T;
  static constexpr bool kGated = G;
};

// f(Shape<tiles, gated>{}) for the instantiation these tokens take.
template <class F>
auto visit_tiles(int64_t tokens, bool gated, F &&f) {
  const int tiles = token_tiles(tokens);
  if (gated)
    return tiles == 1 ? f(Shape<1, true>{}) : tiles == 2 ? f(Shape<2, true>{}) : tiles == 4 ? f(Shape<4, true>{}) : f(Shape<8, true>{});
  return tiles == 1 ? f(Shape<1, false>{}) : tiles == 2 ? f(Shape<2, false>{}) : tiles == 4 ? f(Shape<4, false>{}) : f(Shape<8, false>{});
}

// The parts' row blocks and the grid: every slot of the GPU (blocks per SM x SMs), never more
// blocks than items.
struct Plan {
  FewParts parts{};
  int64_t row_blocks = 0, stages = 0, grid = 0;
};
Plan plan(const minfer_cuda_mmq_part *in, int32_t n_parts, const void *up, int64_t k, int32_t sm_count, int per_sm) {
  Plan pl;
  const int64_t part_rows = up ? kBlockRows / 2 : kBlockRows;
  for (int i = 0; i < kParts; ++i) {
    if (i < n_parts) {
      pl.parts.w[i] = in[i].w, pl.parts.y[i] = in[i].y, pl.parts.add[i] = in[i].add, pl.parts.m[i] = in[i].m;
      pl.parts.add_broadcast[i] = in[i].add_broadcast;
      pl.row_blocks += (in[i].m + part_rows - 1) / part_rows;
    }
    pl.parts.blocks_end[i] = pl.row_blocks;
  }
  pl.parts.up = up;
  pl.stages = k / (32 * kStageBlocks);
  pl.grid = std::min<int64_t>(int64_t(sm_count > 0 ? sm_count : 132) * std::max(1, per_sm), pl.row_blocks * pl.stages);
  return pl;
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" int minfer_cuda_few_token_mma_supported(int32_t dtype, int64_t k, int64_t tokens) {
  return dtype == MINFER_DTYPE_Q4_0 && k % (32 * kStageBlocks) == 0 && tokens >= 1 && tokens <= 8 * kMaxTiles;
}

static int per_sm_for(int64_t tokens, bool gated) {
  return visit_tiles(tokens, gated, [](auto s) { return blocks_per_sm<decltype(s)::kTiles, decltype(s)::kGated>(); });
}

extern "C" size_t minfer_cuda_few_token_partials_bytes(const minfer_cuda_mmq_part *parts, int32_t n_parts, const void *up, int64_t k,
                                                       int64_t tokens, int32_t sm_count) {
  if (n_parts < 1 || n_parts > kParts || tokens < 1 || tokens > 8 * kMaxTiles) return 0;
  const Plan pl = plan(parts, n_parts, up, k, sm_count, per_sm_for(tokens, up != nullptr));
  return size_t(2 * pl.grid) * kBlockRows * size_t(tokens) * sizeof(float);
}

extern "C" cudaError_t minfer_cuda_few_token_mma(minfer_cuda_launch_cfg *cfg, int32_t dtype, const minfer_cuda_mmq_part *in, int32_t n_parts,
                                                 const void *up, int32_t act, const void *xq, int64_t k, int64_t tokens, int32_t sm_count,
                                                 float *partials) {
  if (!minfer_cuda_few_token_mma_supported(dtype, k, tokens)) return cudaErrorNotSupported;
  if (n_parts < 1 || n_parts > kParts || (up && n_parts != 1) || !partials) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(xq) % 16 || reinterpret_cast<uintptr_t>(up) % 16) return cudaErrorMisalignedAddress;  // 16-byte pieces
  for (int i = 0; i < n_parts; ++i)
    if (reinterpret_cast<uintptr_t>(in[i].w) % 16) return cudaErrorMisalignedAddress;
  const int per_sm = per_sm_for(tokens, up != nullptr);
  if (per_sm < 1) return cudaErrorNotSupported;  // the shared memory it wants is not there
  Plan pl = plan(in, n_parts, up, k, sm_count, per_sm);
  pl.parts.partials = partials;  // minfer_cuda_few_token_partials_bytes said how much
  pl.parts.act = act;
  const auto *x = static_cast<const minfer_cuda_q8_act4 *>(xq);
  visit_tiles(tokens, up != nullptr, [&](auto s) {
    constexpr int T = decltype(s)::kTiles;
    launch_kernel(cfg, few_token_mma_kernel<T, decltype(s)::kGated>, unsigned(pl.grid), kWarps * 32, smem_bytes(T), pl.parts, x, k, tokens);
    return 0;
  });
  cudaError_t e = launched(cfg, up ? (act == MINFER_CUDA_GLU_GELU ? "few_token_mma_kernel (gate, up, gelu)" : "few_token_mma_kernel (gate, up, silu)")
                                     : "few_token_mma_kernel", dtype);
  if (e != cudaSuccess || (pl.grid <= pl.row_blocks && pl.row_blocks % pl.grid == 0)) return e;  // no row block cut
  const auto sum = [&](auto gated) {
    constexpr bool G = decltype(gated)::value;
    const dim3 grid(unsigned(pl.grid), unsigned((tokens + sum_tokens<G>() - 1) / sum_tokens<G>()));
    launch_kernel(cfg, few_token_sum_kernel<G>, grid, kSumThreads, 0, pl.parts, tokens, pl.stages);
  };
  if (up) sum(std::true_type{});
  else sum(std::false_type{});
  return launched(cfg, "few_token_sum_kernel", dtype);
}
