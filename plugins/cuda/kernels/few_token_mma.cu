// plugins/cuda/kernels/few_token_mma.cu — matmul for a few tokens (up to 32: batched decode
// steps) on f16 tensor cores: y[t] = W x[t] with Q4_0 weights dequantized in registers.
//
// Between the one-token GEMV and MMQ both other paths are compute-bound: the dp4a GEMV
// (mmvq.cu) spends its instructions per token, MMQ (a 64-token tile) its scale arithmetic per
// sub-block product, so a 7B gate matrix cost 27 us at 4 tokens and 66 us at 16-64 tokens
// against ~12 us to read it. Here each weight is dequantized once per call, straight from its
// GGUF block into the B fragment of mma.m16n8k16 (d * (q - 8) in f16: a mask, a subtract and a
// multiply per two weights), and the tokens ride in the M dimension, 16 per tile: the scale is
// inside the weight, so the f32 accumulators take whole rows without any per-block math.
//
// The sum over a block's 32 positions may run in any order, as long as weights and
// activations agree. A lane's 32-bit word of quantized bytes 4q..4q+3 holds positions
// 4q..4q+3 (low nibbles) and 16+4q..16+4q+3 (high); masking its nibble pairs gives the f16
// pairs (4q, 4q+2), (16+4q, 16+4q+2), (4q+1, 4q+3), (16+4q+1, 16+4q+3), which become the
// lane's B registers of the block's two k16 steps. The activations are converted to f16 once
// per call in that order (few_token_x_kernel), so the matching A registers of a lane are one
// 16-byte load per token row.
//
// Both sides come through shared memory, four blocks of k (128 values) a stage, by cp.async in
// 8- and 16-byte pieces, double-buffered: read straight from global memory, a lane's 2-byte
// pieces of 8 rows cost a wavefront per row and the kernel ran at a quarter of the bytes'
// rate (a 7B gate matrix: 52 us at 2-16 tokens).
//
// A warp makes 32 weight rows (four n8 tiles; gated 16 gate rows and the same 16 up
// rows) x all tokens, over its split of k. Measured (H200, 7B gate and down): 35-39 us from 2
// to 16 tokens, 49-54 at 32; the GEMV and MMQ cost 42-89 and 67-71 at 8 tokens. Matrices with few row blocks split k over several
// blocks; their partials are summed in a fixed order by few_token_sum_kernel (the same result
// every run).
#include <cuda_fp16.h>

#include <algorithm>

#include "async_copy.cuh"
#include "glu.cuh"
#include "grid.cuh"
#include "minfer/blocks.h"
#include "minfer/dtype.h"

namespace minfer::cuda {
namespace {

constexpr int kWarps = 4;                           // per block
constexpr int kRowTiles = 4;                        // n8 tiles of weight rows per warp
constexpr int kWarpRows = 8 * kRowTiles;            // 32
constexpr int kBlockRows = kWarps * kWarpRows;      // 128 (64 part rows gated)
constexpr int kStageBlocks = 4;                     // blocks of k per stage (72 bytes of a Q4_0 row)
constexpr int kMaxTiles = 2;                        // token tiles of 16: 32 tokens at most
constexpr int kMaxSplits = 16, kMinSplitStages = 2; // split-K: at most 16, each >= 2 stages
constexpr int kParts = 3;
// Shared rows: a weight row's stage (72 bytes) in 80, so the 8 rows a warp's lanes read at
// once start 20 words apart (distinct banks); a token's stage (256 bytes) in 320, so the two
// tokens of each 8-lane phase of a 16-byte read are 64 bytes apart mod 128.
constexpr int kWStride = 80, kXStride = 160;        // bytes, halves
constexpr int kWPieces = 9;                         // 8-byte pieces of a row's stage

struct FewParts {
  const void *w[kParts];
  float *y[kParts];
  const float *add[kParts];  // NULL, or added: per row (add_broadcast) or per value
  int64_t m[kParts], blocks_end[kParts];  // part p's row blocks are [blocks_end[p-1], blocks_end[p])
  int add_broadcast[kParts];
  const void *up;  // gated (one part, the gate): y = act(gate x) * (up x)
  int act;         // MINFER_CUDA_GLU_*
  int splits;
  float *partials;  // splits > 1: split z of part p at partials + z * stride + off[p], [tokens][m]
  int64_t partial_stride, partial_off[kParts];
};

template <class T>
__device__ __forceinline__ T pick(const T (&a)[kParts], int p) {
  return p == 0 ? a[0] : p == 1 ? a[1] : a[2];
}

// Position of slot s (0..31) of a converted 32-value block: lane q's 8 slots 8q..8q+7 hold
// positions 4q, 4q+2, 4q+1, 4q+3, then the same plus 16 (the order the weight words unpack in).
__device__ __forceinline__ int slot_position(int s) {
  const int q = s >> 3, i = s & 7;
  return (i >= 4 ? 16 : 0) + 4 * q + ((i & 3) == 1 ? 2 : (i & 3) == 2 ? 1 : (i & 3));
}

// x [tokens][k] f32 -> xh [16 * tiles][k] f16, each 32-value block in slot order; rows past
// the tokens are zeros.
__global__ void few_token_x_kernel(const float *x, __half *xh, int64_t k, int64_t tokens, int64_t rows) {
  MINFER_GRID_STRIDE(i, rows * k) {
    const int64_t t = i / k, c = i - t * k, b = c & ~int64_t(31);
    const float v = t < tokens ? x[t * k + b + slot_position(int(c & 31))] : 0.0f;
    xh[i] = __float2half_rn(v);
  }
}

__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// (word >> shift) & 0x000F000F as two f16 of 1024 + nibble, then d * (nibble - 8).
template <int kShift>
__device__ __forceinline__ uint32_t dequant_pair(uint32_t word, __half2 d) {
  const uint32_t bits = ((word >> kShift) & 0x000F000Fu) | 0x64006400u;
  const __half2 v = __hmul2(__hsub2(*reinterpret_cast<const __half2 *>(&bits), __half2half2(__ushort_as_half(0x6408))), d);  // 0x6408: 1032
  return *reinterpret_cast<const uint32_t *>(&v);
}

template <int kTiles, bool kGated>
__global__ void __launch_bounds__(kWarps * 32, kTiles == 1 ? 4 : 3) few_token_mma_kernel(const __grid_constant__ FewParts parts, const __half *xh, int64_t k,
                                                                     int64_t tokens) {
  constexpr int kTok = 16 * kTiles;
  constexpr int kPartRows = kGated ? kWarpRows / 2 : kWarpRows;  // rows of the part per warp
  __shared__ __align__(16) uint8_t wsm[2][kBlockRows][kWStride];
  __shared__ __align__(16) __half xsm[2][kTok][kXStride];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int64_t nb = k / 32, stages = nb / kStageBlocks, units = parts.blocks_end[kParts - 1] * parts.splits;
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const int64_t rb = unit / parts.splits;
    const int split = int(unit - rb * parts.splits);
    const int p = rb < parts.blocks_end[0] ? 0 : rb < parts.blocks_end[1] ? 1 : 2;
    const int64_t m = pick(parts.m, p);
    const int64_t base = (rb - (p == 0 ? 0 : pick(parts.blocks_end, p - 1))) * (kWarps * kPartRows);  // the block's first part row
    // The pieces this thread copies each stage: shared row i is warp i / 32's tile (i / 8) % 4,
    // lane row i % 8 (gated: tiles 2 and 3 are up's rows); rows past the end copy the last row.
    // Found again each stage: keeping nine pointers cost a block per SM of registers.
    const auto source = [&](int i) {
      const int r = (i >> 3) & 3;
      const bool up = kGated && r >= kRowTiles / 2;
      const int64_t o_want = base + (i >> 5) * kPartRows + 8 * (up ? r - kRowTiles / 2 : r) + (i & 7), o = o_want < m ? o_want : m - 1;
      return static_cast<const uint8_t *>(up ? parts.up : pick(parts.w, p)) + o * nb * int64_t(sizeof(minfer_block_q4_0));
    };
    const auto issue = [&](int64_t s, int buf) {
#pragma unroll
      for (int j = 0; j < kWPieces; ++j) {
        const int idx = threadIdx.x + kWarps * 32 * j, i = idx / kWPieces, piece = idx % kWPieces;
        cp_async_zfill<8>(&wsm[buf][i][8 * piece], source(i) + s * kStageBlocks * int64_t(sizeof(minfer_block_q4_0)) + 8 * piece, 8);
      }
#pragma unroll
      for (int j = 0; j < kTok * 16 / (kWarps * 32); ++j) {  // a token's stage: 16 pieces of 16 bytes
        const int idx = threadIdx.x + kWarps * 32 * j, t = idx >> 4, piece = idx & 15;
        cp_async16(&xsm[buf][t][8 * piece], xh + t * k + s * kStageBlocks * 32 + 8 * piece);
      }
      cp_async_commit();
    };
    float acc[kTiles][kRowTiles][4];
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int r = 0; r < kRowTiles; ++r) acc[t][r][0] = acc[t][r][1] = acc[t][r][2] = acc[t][r][3] = 0.0f;
    const int64_t s0 = stages * split / parts.splits, s1 = stages * (split + 1) / parts.splits;
    issue(s0, 0);
    for (int64_t s = s0; s < s1; ++s) {
      const int buf = int(s - s0) & 1;
      if (s + 1 < s1) {
        issue(s + 1, buf ^ 1);
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
#pragma unroll
      for (int u = 0; u < kStageBlocks; ++u) {
        uint4 lo[kTiles], hi[kTiles];  // tokens 16t + g and 16t + g + 8: slots 8q..8q+7 of block u
#pragma unroll
        for (int t = 0; t < kTiles; ++t) {
          lo[t] = *reinterpret_cast<const uint4 *>(&xsm[buf][16 * t + g][32 * u + 8 * q]);
          hi[t] = *reinterpret_cast<const uint4 *>(&xsm[buf][16 * t + g + 8][32 * u + 8 * q]);
        }
#pragma unroll
        for (int r = 0; r < kRowTiles; ++r) {
          const uint16_t *b = reinterpret_cast<const uint16_t *>(&wsm[buf][warp * kWarpRows + 8 * r + g][18 * u]);
          const uint32_t word = uint32_t(b[1 + 2 * q]) | (uint32_t(b[2 + 2 * q]) << 16);
          const __half2 d = __half2half2(__ushort_as_half(b[0]));
          const uint32_t b00 = dequant_pair<0>(word, d), b01 = dequant_pair<8>(word, d);
          const uint32_t b10 = dequant_pair<4>(word, d), b11 = dequant_pair<12>(word, d);
#pragma unroll
          for (int t = 0; t < kTiles; ++t) {
            const uint32_t a0[4] = {lo[t].x, hi[t].x, lo[t].y, hi[t].y}, a1[4] = {lo[t].z, hi[t].z, lo[t].w, hi[t].w};
            mma_f16(acc[t][r], a0, b00, b01);
            mma_f16(acc[t][r], a1, b10, b11);
          }
        }
      }
      __syncthreads();  // this buffer is refilled next stage
    }
    const int64_t o0 = base + warp * kPartRows;
    if (o0 >= m) continue;
    // acc[t][r][h * 2 + j]: token 16t + g + 8h, row 8r + 2q + j of the warp's tiles.
    float *const y = parts.splits > 1 ? parts.partials + split * parts.partial_stride + pick(parts.partial_off, p) : pick(parts.y, p);
    const float *const add = parts.splits > 1 ? nullptr : pick(parts.add, p);
    const bool bcast = pick(parts.add_broadcast, p) != 0;
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int r = 0; r < (kGated ? kRowTiles / 2 : kRowTiles); ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t tok = 16 * t + g + 8 * h, o = o0 + 8 * r + 2 * q;
          if (tok >= tokens || o >= m) continue;
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            if (o + j >= m) break;
            float v = acc[t][r][2 * h + j];
            if (kGated) v = glu(parts.act, v, acc[t][r + kRowTiles / 2][2 * h + j]);
            const int64_t at = tok * m + o + j;
            y[at] = add ? v + add[bcast ? o + j : at] : v;
          }
        }
  }
}

// y = the splits' partials summed in split order, plus the add.
__global__ void few_token_sum_kernel(const __grid_constant__ FewParts parts, int64_t tokens) {
  const int64_t n0 = tokens * parts.m[0], n1 = n0 + tokens * parts.m[1], n = n1 + tokens * parts.m[2];
  MINFER_GRID_STRIDE(i, n) {
    const int p = i < n0 ? 0 : i < n1 ? 1 : 2;
    const int64_t j = i - (p == 0 ? 0 : p == 1 ? n0 : n1), m = pick(parts.m, p);
    float v = 0.0f;
    for (int z = 0; z < parts.splits; ++z) v += parts.partials[z * parts.partial_stride + pick(parts.partial_off, p) + j];
    const float *add = pick(parts.add, p);
    if (add) v += add[pick(parts.add_broadcast, p) ? j % m : j];
    pick(parts.y, p)[j] = v;
  }
}

int64_t token_tiles(int64_t tokens) { return tokens <= 16 ? 1 : 2; }

// The parts' row blocks, and the split that fills the GPU: about two blocks per SM.
struct Plan {
  FewParts parts{};
  int64_t row_blocks = 0;
};
Plan plan(const minfer_cuda_mmq_part *in, int32_t n_parts, const void *up, int64_t k, int64_t tokens, int32_t sm_count) {
  Plan pl;
  const int64_t part_rows = up ? kBlockRows / 2 : kBlockRows;
  int64_t off = 0;
  for (int i = 0; i < kParts; ++i) {
    if (i < n_parts) {
      pl.parts.w[i] = in[i].w, pl.parts.y[i] = in[i].y, pl.parts.add[i] = in[i].add, pl.parts.m[i] = in[i].m;
      pl.parts.add_broadcast[i] = in[i].add_broadcast;
      pl.row_blocks += (in[i].m + part_rows - 1) / part_rows;
      pl.parts.partial_off[i] = off;
      off += tokens * in[i].m;
    }
    pl.parts.blocks_end[i] = pl.row_blocks;
  }
  pl.parts.up = up;
  pl.parts.partial_stride = off;
  // Blocks to aim at: enough warps per SM to keep the weight stream going (each warp has one
  // stage in flight), fewer where the partials of many tokens would cost more than they hide.
  const int64_t want = int64_t(sm_count > 0 ? sm_count : 132) * (tokens <= 16 ? 6 : tokens <= 32 ? 4 : 2);
  int64_t splits = up ? 1 : std::min<int64_t>({kMaxSplits, (want + pl.row_blocks - 1) / pl.row_blocks, std::max<int64_t>(1, (k / (32 * kStageBlocks)) / kMinSplitStages)});
  pl.parts.splits = int(std::max<int64_t>(1, splits));
  return pl;
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" int minfer_cuda_few_token_mma_supported(int32_t dtype, int64_t k, int64_t tokens) {
  return dtype == MINFER_DTYPE_Q4_0 && k % (32 * kStageBlocks) == 0 && tokens >= 1 && tokens <= 16 * kMaxTiles;
}

extern "C" size_t minfer_cuda_few_token_x_bytes(int64_t k, int64_t tokens) {
  return size_t(16 * token_tiles(tokens)) * size_t(k) * sizeof(__half);
}

extern "C" cudaError_t minfer_cuda_few_token_x(minfer_cuda_launch_cfg *cfg, const float *x, void *xh, int64_t k, int64_t tokens) {
  if (k % (32 * kStageBlocks) || tokens < 1 || tokens > 16 * kMaxTiles) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(xh) % 16) return cudaErrorMisalignedAddress;  // read as 16-byte pieces
  const int64_t rows = 16 * token_tiles(tokens);
  few_token_x_kernel<<<grid_for(cfg, rows * k), kBlock, 0, cfg->stream>>>(x, static_cast<__half *>(xh), k, tokens, rows);
  return launched(cfg, "few_token_x_kernel");
}

extern "C" size_t minfer_cuda_few_token_partials_bytes(const minfer_cuda_mmq_part *parts, int32_t n_parts, const void *up, int64_t k,
                                                       int64_t tokens, int32_t sm_count) {
  if (n_parts < 1 || n_parts > kParts) return 0;
  const Plan pl = plan(parts, n_parts, up, k, tokens, sm_count);
  return pl.parts.splits > 1 ? size_t(pl.parts.splits) * size_t(pl.parts.partial_stride) * sizeof(float) : 0;
}

extern "C" cudaError_t minfer_cuda_few_token_mma(minfer_cuda_launch_cfg *cfg, int32_t dtype, const minfer_cuda_mmq_part *in, int32_t n_parts,
                                                 const void *up, int32_t act, const void *xh, int64_t k, int64_t tokens, int32_t sm_count,
                                                 float *partials) {
  if (!minfer_cuda_few_token_mma_supported(dtype, k, tokens)) return cudaErrorNotSupported;
  if (n_parts < 1 || n_parts > kParts || (up && n_parts != 1)) return cudaErrorInvalidValue;
  Plan pl = plan(in, n_parts, up, k, tokens, sm_count);
  if (pl.parts.splits > 1 && !partials) return cudaErrorInvalidValue;  // minfer_cuda_few_token_partials_bytes said how much
  pl.parts.partials = partials;
  pl.parts.act = act;
  const int64_t units = pl.row_blocks * pl.parts.splits;
  const unsigned grid = unsigned(std::min<int64_t>(units, cfg->max_blocks));
  const auto *x = static_cast<const __half *>(xh);
  const int64_t tiles = token_tiles(tokens);
  const auto run = [&](auto kernel) { kernel<<<grid, kWarps * 32, 0, cfg->stream>>>(pl.parts, x, k, tokens); };
  if (up) tiles == 1 ? run(few_token_mma_kernel<1, true>) : run(few_token_mma_kernel<2, true>);
  else tiles == 1 ? run(few_token_mma_kernel<1, false>) : run(few_token_mma_kernel<2, false>);
  cudaError_t e = launched(cfg, up ? (act == MINFER_CUDA_GLU_GELU ? "few_token_mma_kernel (gate, up, gelu)" : "few_token_mma_kernel (gate, up, silu)")
                                     : "few_token_mma_kernel", dtype);
  if (e != cudaSuccess || pl.parts.splits == 1) return e;
  int64_t n = 0;
  for (int i = 0; i < n_parts; ++i) n += tokens * in[i].m;
  few_token_sum_kernel<<<grid_for(cfg, n), kBlock, 0, cfg->stream>>>(pl.parts, tokens);
  return launched(cfg, "few_token_sum_kernel", dtype);
}
