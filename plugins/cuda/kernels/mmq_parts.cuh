// plugins/cuda/kernels/mmq_parts.cuh — what the prompt matmuls share (mmq.cu: int8 tensor
// cores; mmq_f16.cu: K-quant weights on f16 ones): the weights of one launch, the order tiles
// are taken in, the split-K plan and the kernel that adds the splits' partial sums.
#pragma once

#include <cstdint>

#include "grid.cuh"
#include "launchers.h"

namespace minfer::cuda {

// The weights of one launch, sharing x: part i's row tiles are [tiles_end[i-1], tiles_end[i])
// of the launch's row tiles, so no tile straddles two parts.
struct MmqParts {
  const void *w[kMinferCudaMmqMaxParts];
  float *y[kMinferCudaMmqMaxParts];
  const float *add[kMinferCudaMmqMaxParts];
  int64_t m[kMinferCudaMmqMaxParts], tiles_end[kMinferCudaMmqMaxParts];
  int add_broadcast[kMinferCudaMmqMaxParts];
  int n;
  int copy8;  // every weight and its rows 8-byte aligned: the stages copy 8-byte pieces
  // Split-K: each tile's stages are cut into `splits` ranges, one block each (units: tile *
  // splits + split). Split z writes its partial products where part p's y would be in
  // partials + z * partial_stride + partial_off[p]; mmq_split_sum_kernel adds them in split
  // order (the same sum every run), then the add.
  int splits;
  float *partials;
  int64_t partial_stride, partial_off[kMinferCudaMmqMaxParts];
  int act;  // gated: the gate's activation (MINFER_CUDA_GLU_*)
};

// Part p's entry, by selects (a run-time index would copy the parameter to local memory).
template <class T>
__device__ __forceinline__ T pick(const T (&a)[kMinferCudaMmqMaxParts], int p) {
  static_assert(kMinferCudaMmqMaxParts == 3, "pick() spells out three parts");
  return p == 0 ? a[0] : p == 1 ? a[1] : a[2];
}

// The parts of a launch of tiles tile_rows high (gated: a gate and an up weight whose rows
// share tiles, so the tiles count the gate's rows only), with room for `splits` partial sums.
inline MmqParts make_mmq_parts(const minfer_cuda_mmq_part *in, int n_parts, int tile_rows, bool gated, int64_t tokens, int splits, float *partials,
                               int act) {
  MmqParts parts{};
  parts.act = act;
  int64_t row_tiles = 0;
  for (int i = 0; i < n_parts; ++i) {
    parts.w[i] = in[i].w, parts.y[i] = in[i].y, parts.add[i] = in[i].add, parts.m[i] = in[i].m;
    parts.add_broadcast[i] = in[i].add_broadcast;
    if (!gated || i == 0) row_tiles += (in[i].m + tile_rows - 1) / tile_rows;
    parts.tiles_end[i] = row_tiles;
  }
  for (int i = n_parts; i < kMinferCudaMmqMaxParts; ++i) parts.tiles_end[i] = row_tiles;
  parts.n = n_parts;
  parts.splits = splits;
  for (int i = 0; i < kMinferCudaMmqMaxParts; ++i) {
    parts.partial_off[i] = parts.partial_stride;
    if (i < n_parts) parts.partial_stride += in[i].m * tokens;
  }
  parts.partials = splits > 1 ? partials : nullptr;
  return parts;
}

// A unit's tile: tiles go in groups of group_tiles token tiles, a group's row tiles in turn,
// each with all of the group's token tiles one after another, so the weights are read from
// memory once per group and the group's activations stay in L2 (with row tiles fastest, a
// long prefill step read every weight again for each wave of blocks).
struct TileAt {
  int64_t row_tile, token_tile;
};
__device__ __forceinline__ TileAt tile_at(int64_t tile, int64_t row_tiles, int64_t token_tiles, int64_t group_tiles) {
  const int64_t per_group = row_tiles * group_tiles, grp = tile / per_group, in_group = tile - grp * per_group;
  const int64_t group_size = token_tiles - grp * group_tiles < group_tiles ? token_tiles - grp * group_tiles : group_tiles;
  return {in_group / group_size, grp * group_tiles + in_group % group_size};
}

// Split-K from a wave model: a launch takes ceil(units / slots) waves (slots: the blocks all
// SMs hold at once), each as long as its units' stages plus one for a split unit's partials.
// A few tiles for 132 SMs (a 7B's down projection at 512 tokens) leave SMs idle; cutting k
// fills them. Returns the splits and the cost in stage times.
struct SplitPlan {
  int splits;
  double cost;
};
inline SplitPlan plan_splits(int64_t tiles, int64_t stages, int64_t slots, bool can_split, int max_splits, int min_split_stages) {
  SplitPlan best{1, 0.0};
  for (int ks = 1; ks <= max_splits; ++ks) {
    if (ks > 1 && (!can_split || stages / ks < min_split_stages)) break;
    const int64_t waves = (tiles * ks + slots - 1) / slots;
    const double cost = double(waves) * (double((stages + ks - 1) / ks) + (ks > 1 ? 1.0 : 0.0));
    if (ks == 1 || cost < best.cost) best = {ks, cost};
  }
  return best;
}

// The partials' bytes for `splits` splits of these parts at this many tokens.
inline size_t mmq_partials_bytes(const minfer_cuda_mmq_part *parts, int n_parts, int64_t tokens, int splits) {
  if (splits <= 1) return 0;
  size_t bytes = 0;
  for (int i = 0; i < n_parts; ++i) bytes += size_t(parts[i].m * tokens) * splits * sizeof(float);
  return bytes;
}

// Adds the splits' partial sums (and the add) into each part's y (mmq.cu).
cudaError_t launch_mmq_split_sum(minfer_cuda_launch_cfg *cfg, const MmqParts &parts, int64_t tokens, int32_t dtype);

}  // namespace minfer::cuda
