// plugins/cuda/kernels/mmq.cu — prefill matmul on int8 tensor cores, reading the weights' blocks.
//
// y[t][o] = sum over 32-value sub-blocks b of dw[o][b] * dx[t][b] * (q_w[o][b] . q_x[t][b])
// (+ m_w[o][b] * sum x[t][b] for types with a minimum): the weights stay in their GGUF blocks
// (every type of qblock.cuh: no f16 copy) and the activations are quantized to 8 bits per 32
// values (mmvq.cu's minfer_cuda_q8_act). A 128-thread block makes a 64 x 64 tile of y (weight
// rows x tokens); each warp 32 x 32 from mma.m16n8k32 s8 products. One product covers exactly
// one sub-block on each side, so its int32 result is scaled by the two sides' scales into f32
// accumulators right away, in registers (Q6_K, scaled per 16 values, takes two products).
//
// Per stage, 4 sub-blocks of k (128 values) of the 64 weight rows are unpacked to bytes
// (qblock.cuh) and the 64 tokens' quantized values copied, both into shared memory
// rows padded to 144 bytes so the fragment loads of the 8 row groups fall in distinct banks.
// The next stage is read from global memory into registers while this one is multiplied.
#include <cuda_fp16.h>

#include "grid.cuh"
#include "minfer/blocks.h"
#include "minfer/dtype.h"
#include "q8_act.cuh"
#include "qblock.cuh"


namespace minfer::cuda {
namespace {

constexpr int kTileRows = 64, kTileTokens = 64, kStageBlocks = 4, kThreads = 128;
constexpr int kRowBytes = kStageBlocks * 32 + 16;  // padded smem row
constexpr int kItems = kTileRows * kStageBlocks / kThreads;  // (row, block) pairs per thread per stage: 2

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
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}

// What one thread carries from global memory to shared memory for one stage.
struct StageRegs {
  SubBlock w[kItems];
  uint2 xq[kItems][4];
  float xd[kItems], xs[kItems];
};

template <class Block>
__global__ void __launch_bounds__(kThreads) mmq_kernel(const Block *w, const minfer_cuda_q8_act *x, float *y, int64_t k, int64_t m,
                                                       int64_t tokens, int64_t row_tiles, int64_t token_tiles, const float *add,
                                                       int add_broadcast) {
  __shared__ __align__(16) uint8_t wq_s[kTileRows * kRowBytes];
  __shared__ __align__(16) uint8_t xq_s[kTileTokens * kRowBytes];
  using QB = QBlock<Block>;
  __shared__ float wd_s[kStageBlocks][kTileRows], xd_s[kStageBlocks][kTileTokens];
  __shared__ float wd2_s[QB::kTwoScales ? kStageBlocks : 1][kTileRows];                        // Q6_K: values 16..31
  __shared__ float wm_s[QB::kOffset ? kStageBlocks : 1][kTileRows], xs_s[QB::kOffset ? kStageBlocks : 1][kTileTokens];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tg = lane % 4;
  const int wm = warp / 2, wn = warp % 2;  // this warp's 32 x 32 of the tile
  const int64_t kb = k / 32, stages = (kb + kStageBlocks - 1) / kStageBlocks, nb = kb / QB::kSubs;
  for (int64_t tile = blockIdx.x; tile < row_tiles * token_tiles; tile += gridDim.x) {
    const int64_t row0 = (tile % row_tiles) * kTileRows, tok0 = (tile / row_tiles) * kTileTokens;
    float acc[2][4][4] = {};
    StageRegs r;
    // Thread i carries (row or token) i / 4... as item it: index p = threadIdx.x + it * 128,
    // row = p / 4, block = p % 4: consecutive threads read consecutive blocks of a row.
    const auto load = [&](int64_t stage) {
#pragma unroll
      for (int it = 0; it < kItems; ++it) {
        const int p = threadIdx.x + it * kThreads, rr = p / kStageBlocks, bb = p % kStageBlocks;
        const int64_t blk = stage * kStageBlocks + bb, row = row0 + rr, tok = tok0 + rr;
        if (row < m && blk < kb) {
          unpack_sub(w + row * nb, blk, r.w[it]);
        } else {
#pragma unroll
          for (int i = 0; i < 8; ++i) r.w[it].q[i] = 0;
          r.w[it].d[0] = r.w[it].d[1] = r.w[it].m = 0;
        }
        if (tok < tokens && blk < kb) {
          const minfer_cuda_q8_act &a = x[tok * kb + blk];
          const uint2 *q = reinterpret_cast<const uint2 *>(a.qs);
#pragma unroll
          for (int i = 0; i < 4; ++i) r.xq[it][i] = q[i];
          r.xd[it] = a.d;
          r.xs[it] = a.s;
        } else {
#pragma unroll
          for (int i = 0; i < 4; ++i) r.xq[it][i] = make_uint2(0, 0);
          r.xd[it] = r.xs[it] = 0;
        }
      }
    };
    const auto store = [&]() {
#pragma unroll
      for (int it = 0; it < kItems; ++it) {
        const int p = threadIdx.x + it * kThreads, rr = p / kStageBlocks, bb = p % kStageBlocks;
        uint4 *wdst = reinterpret_cast<uint4 *>(wq_s + rr * kRowBytes + bb * 32);
        const uint32_t *q = r.w[it].q;
        wdst[0] = make_uint4(q[0], q[1], q[2], q[3]);
        wdst[1] = make_uint4(q[4], q[5], q[6], q[7]);
        uint2 *xdst = reinterpret_cast<uint2 *>(xq_s + rr * kRowBytes + bb * 32);
#pragma unroll
        for (int i = 0; i < 4; ++i) xdst[i] = r.xq[it][i];
        wd_s[bb][rr] = r.w[it].d[0];
        xd_s[bb][rr] = r.xd[it];
        if (QB::kTwoScales) wd2_s[bb][rr] = r.w[it].d[1];
        if (QB::kOffset) wm_s[bb][rr] = r.w[it].m, xs_s[bb][rr] = r.xs[it];
      }
    };
    load(0);
    for (int64_t s = 0; s < stages; ++s) {
      __syncthreads();  // the previous stage's fragments are read
      store();
      __syncthreads();
      if (s + 1 < stages) load(s + 1);  // in flight while this stage multiplies
#pragma unroll
      for (int bb = 0; bb < kStageBlocks; ++bb) {
        // Fragments by ldmatrix: A's matrices are (rows 0-7 | 8-15) x (bytes 0-15 | 16-31) of the
        // warp's 16-row group, B's (bytes 0-15 | 16-31) x (token groups j, j + 1).
        uint32_t a[2][4], b[4][2];
#pragma unroll
        for (int i = 0; i < 2; ++i)
          ldmatrix_x4(a[i], wq_s + (wm * 32 + i * 16 + lane % 8 + 8 * ((lane / 8) & 1)) * kRowBytes + bb * 32 + 16 * (lane / 16));
#pragma unroll
        for (int j = 0; j < 4; j += 2) {
          uint32_t t[4];
          ldmatrix_x4(t, xq_s + (wn * 32 + (j + lane / 16) * 8 + lane % 8) * kRowBytes + bb * 32 + 16 * ((lane / 8) & 1));
          b[j][0] = t[0], b[j][1] = t[1], b[j + 1][0] = t[2], b[j + 1][1] = t[3];
        }
        float dw[2][2], dx[4][2];
#pragma unroll
        for (int i = 0; i < 2; ++i) dw[i][0] = wd_s[bb][wm * 32 + i * 16 + g], dw[i][1] = wd_s[bb][wm * 32 + i * 16 + g + 8];
#pragma unroll
        for (int j = 0; j < 4; ++j) dx[j][0] = xd_s[bb][wn * 32 + j * 8 + tg * 2], dx[j][1] = xd_s[bb][wn * 32 + j * 8 + tg * 2 + 1];
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            int c[4];
            if (QB::kTwoScales) {  // the two 16-value halves have their own scales: a product each
              const uint32_t lo[4] = {a[i][0], a[i][1], 0u, 0u}, hi[4] = {0u, 0u, a[i][2], a[i][3]};
              int c2[4];
              mma_s8(c, lo, b[j]);
              mma_s8(c2, hi, b[j]);
              const float dh0 = wd2_s[bb][wm * 32 + i * 16 + g], dh1 = wd2_s[bb][wm * 32 + i * 16 + g + 8];
              acc[i][j][0] = fmaf(float(c[0]) * dw[i][0] + float(c2[0]) * dh0, dx[j][0], acc[i][j][0]);
              acc[i][j][1] = fmaf(float(c[1]) * dw[i][0] + float(c2[1]) * dh0, dx[j][1], acc[i][j][1]);
              acc[i][j][2] = fmaf(float(c[2]) * dw[i][1] + float(c2[2]) * dh1, dx[j][0], acc[i][j][2]);
              acc[i][j][3] = fmaf(float(c[3]) * dw[i][1] + float(c2[3]) * dh1, dx[j][1], acc[i][j][3]);
              continue;
            }
            mma_s8(c, a[i], b[j]);
            acc[i][j][0] = fmaf(float(c[0]) * dx[j][0], dw[i][0], acc[i][j][0]);
            acc[i][j][1] = fmaf(float(c[1]) * dx[j][1], dw[i][0], acc[i][j][1]);
            acc[i][j][2] = fmaf(float(c[2]) * dx[j][0], dw[i][1], acc[i][j][2]);
            acc[i][j][3] = fmaf(float(c[3]) * dx[j][1], dw[i][1], acc[i][j][3]);
            if (QB::kOffset) {  // + m_w * sum(x): a rank-one term per block
              const float m0 = wm_s[bb][wm * 32 + i * 16 + g], m1 = wm_s[bb][wm * 32 + i * 16 + g + 8];
              const float s0 = xs_s[bb][wn * 32 + j * 8 + tg * 2], s1 = xs_s[bb][wn * 32 + j * 8 + tg * 2 + 1];
              acc[i][j][0] = fmaf(m0, s0, acc[i][j][0]);
              acc[i][j][1] = fmaf(m0, s1, acc[i][j][1]);
              acc[i][j][2] = fmaf(m1, s0, acc[i][j][2]);
              acc[i][j][3] = fmaf(m1, s1, acc[i][j][3]);
            }
          }
      }
    }
    // c0, c1: weight row g, tokens 2tg, 2tg+1; c2, c3: row g + 8.
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t row = row0 + wm * 32 + i * 16 + g + (e >= 2 ? 8 : 0), tok = tok0 + wn * 32 + j * 8 + tg * 2 + (e & 1);
          if (row < m && tok < tokens) y[tok * m + row] = acc[i][j][e] + (add ? add[add_broadcast ? row : tok * m + row] : 0.0f);
        }
    __syncthreads();  // shared memory is rewritten by the next tile
  }
}

template <class Block>
cudaError_t launch(minfer_cuda_launch_cfg *cfg, const void *w, const void *xq, float *y, int64_t k, int64_t m, int64_t tokens,
                   const float *add, int add_broadcast, const char *name, int32_t dtype) {
  const int64_t row_tiles = (m + kTileRows - 1) / kTileRows, token_tiles = (tokens + kTileTokens - 1) / kTileTokens;
  const int64_t tiles = row_tiles * token_tiles;
  mmq_kernel<Block><<<unsigned(tiles < cfg->max_blocks ? tiles : cfg->max_blocks), kThreads, 0, cfg->stream>>>(
      static_cast<const Block *>(w), static_cast<const minfer_cuda_q8_act *>(xq), y, k, m, tokens, row_tiles, token_tiles, add,
      add_broadcast);
  return launched(cfg, name, dtype);
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" int minfer_cuda_mmq_supported(int32_t dtype) {
  return visit_int8_block(dtype, [](auto) {});
}

extern "C" cudaError_t minfer_cuda_mmq(minfer_cuda_launch_cfg *cfg, int32_t dtype, const void *w, const void *xq, float *y, int64_t k,
                                       int64_t m, int64_t tokens, const float *add, int32_t add_broadcast) {
  if (k % minfer_dtype_info(dtype).block_values) return cudaErrorInvalidValue;
  cudaError_t err = cudaErrorNotSupported;
  visit_int8_block(dtype, [&](auto tag) {
    err = launch<decltype(tag)>(cfg, w, xq, y, k, m, tokens, add, add_broadcast, "mmq_kernel", dtype);
  });
  return err;
}
