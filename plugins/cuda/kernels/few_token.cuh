// plugins/cuda/kernels/few_token.cuh — what the few-token tensor-core matmuls share
// (few_token_mma.cu: Q4_0 on int8 tensor cores; few_token_q6k.cu: Q6_K on f16 ones): the
// block's tile (4 warps x two m16 row tiles = 128 rows; gated: 16 gate and the same 16 up rows
// a warp), the parts of one launch, the stream-K cut of the work over the grid,
// the write-out of a row block, and the kernel that sums the row blocks stream-K cut. The
// work is (row block, stage) items, rb * stages + s, every token in each.
#pragma once

#include <cstdint>

#include "async_copy.cuh"
#include "glu.cuh"
#include "grid.cuh"

namespace minfer::cuda::few_token {

constexpr int kWarps = 4;                       // per block
constexpr int kRowTiles = 2;                    // m16 tiles of weight rows per warp
constexpr int kWarpRows = 16 * kRowTiles;       // 32
constexpr int kBlockRows = kWarps * kWarpRows;  // 128 (64 part rows gated)
constexpr int kMaxTokens = 64;
constexpr int kParts = 3;
constexpr int kMinBlocks = 2;  // blocks per SM the registers must allow

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
__host__ __device__ __forceinline__ T pick(const T (&a)[kParts], int p) {
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

// Stream-K: the items, cut evenly over the grid: block c takes [first_item(c), first_item(c +
// 1)). A row block inside one block's range is written out by it; one cut by a range's ends
// leaves partial sums in the slots of the blocks that share it (slot 0 when the row block is
// where that block's range starts, else slot 1), which few_token_sum_kernel adds up in block
// order: the same result every run. Only the block whose range holds a cut row block's start
// (c0) sums it.
__host__ __device__ __forceinline__ int64_t first_item(int64_t c, int64_t total, int64_t grid) { return c * total / grid; }
__device__ __forceinline__ int64_t block_of_item(int64_t i, int64_t total, int64_t grid) { return ((i + 1) * grid - 1) / total; }

// Shared row lr of a block (0..127) is warp lr / 32's row lr % 32: part row base + lr
// (gated: rows 0..15 of a warp are the gate's part rows base + 16 (lr / 32) + lr % 32, 16..31
// the same rows of up).
template <bool kGated>
__device__ __forceinline__ int64_t part_row(int64_t base, int lr) {
  return kGated ? base + 16 * (lr >> 5) + (lr & 15) : base + lr;
}

// A block's accumulators at the end of its share of row block rb: acc[t][r][i] is shared row
// 32 warp + 16 r + g + 8 (i / 2), token 8 t + 2 q + i % 2 (the m16n8 C layout). Whole: y (with
// the add; gated act(gate) * up); else the partial sums into the block's slot.
template <int kTiles, bool kGated>
__device__ __forceinline__ void flush_row_block(const FewParts &parts, const float (&acc)[kTiles][kRowTiles][4], int64_t rb, bool whole,
                                                int slot, int64_t tokens) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
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
}

// A block's accumulators, zeroed.
template <int kTiles>
__device__ __forceinline__ void zero(float (&acc)[kTiles][kRowTiles][4]) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) acc[t][r][0] = acc[t][r][1] = acc[t][r][2] = acc[t][r][3] = 0.0f;
}

// The pipeline over a block's items [i0, i1): kStages - 1 stages issued ahead (issue(buf)
// copies the next item into buf, or commits an empty group past the range), work(buf, s) on
// each item as it lands, and at the end of the block's share of a row block
// flush_row_block and fresh accumulators.
template <int kStages, int kTiles, bool kGated, class Issue, class Work>
__device__ __forceinline__ void run_items(const FewParts &parts, float (&acc)[kTiles][kRowTiles][4], int64_t i0, int64_t i1, int64_t stages,
                                          int64_t tokens, Issue &&issue, Work &&work) {
#pragma unroll
  for (int b = 0; b < kStages - 1; ++b) issue(b);
  zero(acc);
  for (int64_t ic = i0; ic < i1; ++ic) {
    const int n = int((ic - i0) % kStages);
    cp_async_wait<kStages - 2>();
    __syncthreads();  // item ic is in; everyone is done with the buffer refilled next
    issue((n + kStages - 1) % kStages);
    // The block's last item: all its loads have landed, the next kernel may launch (grid.cuh).
    // Measured on an H100 (7B Q4_0 batched decode, two alternating rounds): S_TG at 16
    // sequences +1.8%, at 4 and 64 unchanged.
    if (ic == i1 - 1) release_dependents();
    const int64_t rb = ic / stages, s = ic - rb * stages;
    work(n, s);
    if (s == stages - 1 || ic == i1 - 1) {  // the end of this block's part of row block rb
      const int64_t seg0 = rb * stages > i0 ? rb * stages : i0;
      flush_row_block<kTiles, kGated>(parts, acc, rb, seg0 == rb * stages && s == stages - 1, seg0 == i0 ? 0 : 1, tokens);
      zero(acc);
    }
  }
  cp_async_wait<0>();
}

// Blocks of `kernel` an SM holds with this much dynamic shared memory (0: it cannot run).
template <class Kernel>
int resident_blocks(Kernel *kernel, size_t smem) {
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess) return 0;
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kWarps * 32, smem) != cudaSuccess) return 0;
  return blocks;
}

// The row blocks stream-K cut, each summed by the blocks of grid column c0 (the block whose
// range holds its start; only that one's do): a thread per four output rows of a token,
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
  float4 v = load(c0, i_beg < rb * stages ? 1 : 0, 0), w_up = kGated ? load(c0, i_beg < rb * stages ? 1 : 0, 16) : float4{};
  for (int64_t c = c0 + 1; c <= c1; c += 4) {  // slot 0 of the later blocks: the row block starts their ranges
    float4 w[4], wu[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (c + j <= c1) {
        w[j] = load(c + j, 0, 0);
        if (kGated) wu[j] = load(c + j, 0, 16);
      }
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (c + j <= c1) {
        add4(v, w[j]);
        if (kGated) add4(w_up, wu[j]);
      }
  }
  const RowBlock b = row_block<kGated>(parts, rb);
  float *const y = pick(parts.y, b.p);
  const float *const add = pick(parts.add, b.p);
  const bool bcast = pick(parts.add_broadcast, b.p) != 0;
  const float vs[4] = {v.x, v.y, v.z, v.w}, us[4] = {w_up.x, w_up.y, w_up.z, w_up.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t o = part_row<kGated>(b.base, lr + j);
    if (o >= b.m) break;
    const float r = kGated ? glu(parts.act, vs[j], us[j]) : vs[j];
    const int64_t y_at = tok * b.m + o;
    y[y_at] = add ? r + add[bcast ? o : y_at] : r;
  }
}

// Token tiles of 8 these tokens take.
inline int token_tiles(int64_t tokens) { return tokens <= 8 ? 1 : tokens <= 16 ? 2 : tokens <= 32 ? 4 : 8; }

template <int T, bool G>
struct Shape {
  static constexpr int kTiles = T;
  static constexpr bool kGated = G;
};

// f(Shape<tiles, gated>{}) for tiles 1, 2, 4 or 8.
template <class F>
auto visit_shape(int tiles, bool gated, F &&f) {
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
inline Plan plan(const minfer_cuda_mmq_part *in, int32_t n_parts, const void *up, int64_t stages, int32_t sm_count, int per_sm) {
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
  pl.stages = stages;
  const int64_t slots = int64_t(sm_count > 0 ? sm_count : 132) * (per_sm > 1 ? per_sm : 1), items = pl.row_blocks * stages;
  pl.grid = slots < items ? slots : items;
  return pl;
}

// Whether stream-K cut a row block (else no sum kernel is needed).
inline bool cuts_row_blocks(const Plan &pl) { return !(pl.grid <= pl.row_blocks && pl.row_blocks % pl.grid == 0); }

inline size_t partials_bytes(const Plan &pl, int64_t tokens) { return size_t(2 * pl.grid) * kBlockRows * size_t(tokens) * sizeof(float); }

// The Q6_K kernel (few_token_q6k.cu): x as f16 values, k a multiple of kQ6kRowAlign (rows of
// whole 4-byte words), stages of half a 256-value block.
constexpr int64_t kQ6kRowAlign = 512;
int q6k_blocks_per_sm(int64_t tokens, bool gated);
void launch_q6k(minfer_cuda_launch_cfg *cfg, const Plan &pl, const void *x16, int64_t k, int64_t tokens);

}  // namespace minfer::cuda::few_token
