// plugins/cuda/kernels/few_token_q6k.cu — matmul for a few tokens (2..64: batched decode
// steps) with Q6_K weights on f16 tensor cores: the output head of the Q4_0 and Q4_K_M files
// people run (152k rows on a Qwen2 7B), which MMQ took at the same ~1 ms from 5 to 64 tokens.
//
// Q6_K's scales cover 16 values, int8 MMQ's activations 32: an int8 product would need an
// integer scale, a conversion and a float scale per 16 values, token and row. Here the weights
// come to f16 with their scales in them (d * sc * (q - 32): the 6-bit value through the
// 0x6400 exponent trick, an exact subtraction, one multiply), once for all the tokens, and the
// tokens ride in N of mma.m16n8k16 with f16 x: nothing per token but the mma and its B load.
// The mma's k order is free as long as A and B agree: a lane's k pairs (2q, 2q+1) and (2q+8,
// 2q+9) are taken as a 16-value sub-block's values 4q..4q+3, so a lane's A comes from one word
// of ql and one of qh (four values) and its B is one 8-byte load of x.
//
// Stages are half a Q6_K block (128 values): per row its 64 bytes of ql, 32 of qh, 8 scales
// and d, each piece copied by 4-byte cp.async from the block's 4-byte floor (an odd block
// starts 2 bytes in: its words are read across two); k a multiple of 512 keeps every row's
// start on a word. A stage of x is 256 bytes a token, so 64 tokens fit in three stages of
// weights and x at two blocks an SM. The tile, the stream-K cut and the sums are few_token.cuh's.
#include <cuda_fp16.h>

#include <type_traits>

#include "async_copy.cuh"
#include "few_token.cuh"
#include "mma_f16.cuh"
#include "minfer/blocks.h"

namespace minfer::cuda::few_token {
namespace {

constexpr int kQBytes = int(sizeof(minfer_block_q6_k));
static_assert(kQBytes == q6k_half::kBytes, "Q6_K: ql[128], qh[64], scales[16], d");
using namespace q6k_half;
constexpr int kRowWords = 36;  // a row's words in shared memory
static_assert(kRowWords >= kCopyWords && kRowWords % 32 == 4, "rows g (stride 4 banks) of a warp's four-word read on distinct banks");
constexpr int kXStride = 288;  // a token's 128 f16 values + 32 bytes
static_assert((kXStride / 4) % 32 == 8, "tokens g of a half-warp's 8-byte read on distinct banks");

// Blocks an SM and stages (20-37 KiB each): the kernel is latency bound (ncu, 16 tokens on a
// 7B head: ~4 cycles a warp between issues at two blocks an SM). Up to 8 tokens three blocks
// of three stages (H200, 7B head at 4 tokens: 212 us against 235 at two of four); 9-16 tokens
// keep two of four (three of three: 294 us against 260); 64 tokens two of three.
constexpr int min_blocks_for(int tiles) { return tiles <= 1 ? 3 : 2; }
constexpr int stages_for(int tiles) { return tiles <= 1 ? 3 : tiles <= 4 ? 4 : 3; }
constexpr size_t stage_bytes(int tiles) { return size_t(kBlockRows) * kRowWords * 4 + size_t(8 * tiles) * kXStride; }
constexpr size_t smem_bytes(int tiles) { return stages_for(tiles) * stage_bytes(tiles); }

template <int kTiles, bool kGated>
__global__ void __launch_bounds__(kWarps * 32, min_blocks_for(kTiles)) few_token_q6k_kernel(const __grid_constant__ FewParts parts, const __half *x,
                                                                                int64_t k, int64_t tokens) {
  wait_for_inputs();
  constexpr int kStages = stages_for(kTiles);
  constexpr int kXPieces = 8 * kTiles * 16;  // 16-byte pieces of a stage's x
  extern __shared__ __align__(16) uint8_t smem[];
  const auto wsm = [&](int buf) { return smem + size_t(buf) * stage_bytes(kTiles); };
  const auto xsm = [&](int buf) { return wsm(buf) + kBlockRows * kRowWords * 4; };
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int64_t stages = k / 128, row_bytes = stages / 2 * kQBytes;  // a stage: half a block
  const int64_t total = parts.blocks_end[kParts - 1] * stages;
  const int64_t i0 = first_item(blockIdx.x, total, gridDim.x), i1 = first_item(blockIdx.x + 1, total, gridDim.x);

  // The copies: a warp copies its 32 rows, eight lanes a row (words lane % 8 + 8i: four rows a
  // copy), rows past the end the last row; x's stage of every token (zeros past the tokens).
  const int cw = lane & 7;
  int off[2][4];  // [half][i]: the byte offsets of this lane's words
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 4; ++i) off[h][i] = piece_offset(cw + 8 * i, h);
  int64_t ii = i0, rb_issued = -1;
  const uint8_t *src[8];
  const auto issue = [&](int buf) {
    if (ii < i1) {
      const int64_t rb = ii / stages, s = ii - rb * stages, blk = s >> 1;
      if (rb != rb_issued) {
        rb_issued = rb;
        const RowBlock b = row_block<kGated>(parts, rb);
        const uint8_t *w = static_cast<const uint8_t *>(pick(parts.w, b.p)), *up = static_cast<const uint8_t *>(parts.up);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int lr = 32 * warp + 4 * j + (lane >> 3);
          const int64_t o_want = part_row<kGated>(b.base, lr), o = o_want < b.m ? o_want : b.m - 1;
          src[j] = (kGated && (lr & 16) ? up : w) + o * row_bytes;
        }
      }
      const int64_t floor4 = blk * kQBytes - (blk & 1) * 2;
      const int h = int(s & 1);
      uint32_t *ws = reinterpret_cast<uint32_t *>(wsm(buf)) + (32 * warp + (lane >> 3)) * kRowWords + cw;
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (i < 3 || cw < kCopyWords - 24) cp_async_zfill<4>(ws + 4 * j * kRowWords + 8 * i, src[j] + floor4 + (h ? off[1][i] : off[0][i]), 4);
      uint8_t *xs = xsm(buf);
#pragma unroll
      for (int j = 0; j < (kXPieces + kWarps * 32 - 1) / (kWarps * 32); ++j) {
        const int idx = threadIdx.x + kWarps * 32 * j, t = idx >> 4, piece = idx & 15;
        if (kXPieces % (kWarps * 32) != 0 && idx >= kXPieces) break;
        const bool live = t < tokens;
        const __half *from = x + (live ? t : 0) * k + s * 128 + 8 * piece;
        cp_async16_zfill(xs + t * kXStride + 16 * piece, from, live ? 16 : 0);
      }
      ++ii;
    }
    cp_async_commit();  // empty groups past the range keep the wait count simple
  };

  float acc[kTiles][kRowTiles][4];

  // One stage (half h of a block): the lane's rows g and g + 8 of both row tiles (rr = 2 r +
  // h8), the half's 8 sub-blocks in two rounds of l0: per row one word of ql's low-nibble run,
  // one of its high run and one of qh give four sub-blocks' four values.
  const auto work = [&](int n, auto odd) {
    constexpr bool kOdd = decltype(odd)::value;
    const uint32_t *wrows = reinterpret_cast<const uint32_t *>(wsm(n)) + 32 * warp * kRowWords;
    const uint8_t *xs = xsm(n);
    const uint32_t *row[4];
    float d[4];
    uint32_t sc[4][2];
#pragma unroll
    for (int rr = 0; rr < 4; ++rr) {
      row[rr] = wrows + (16 * (rr >> 1) + g + 8 * (rr & 1)) * kRowWords;
      d[rr] = scale_d<kOdd>(row[rr]);
      sc[rr][0] = piece_word<kOdd>(row[rr], kScWord, 0), sc[rr][1] = piece_word<kOdd>(row[rr], kScWord, 4);
    }
#pragma unroll
    for (int l0 = 0; l0 < 32; l0 += 16) {
      uint32_t u[4][4];  // [rr][sub]: the 6-bit values of the half's sub-block l0/16 + 2 sub
#pragma unroll
      for (int rr = 0; rr < 4; ++rr) {
        const uint32_t lo = piece_word<kOdd>(row[rr], kQlWord, l0 + 4 * q), hi = piece_word<kOdd>(row[rr], kQlWord, 32 + l0 + 4 * q);
        const uint32_t qh = piece_word<kOdd>(row[rr], kQhWord, l0 + 4 * q);
        unpack(lo, hi, qh, u[rr]);
      }
#pragma unroll
      for (int sub = 0; sub < 4; ++sub) {
        const int j = l0 / 16 + 2 * sub;  // the sub-block within the half
        uint32_t a[kRowTiles][4];
#pragma unroll
        for (int rr = 0; rr < 4; ++rr) {
          const float scale = d[rr] * float(int8_t(sc[rr][j >> 2] >> (8 * (j & 3))));
          dequant6(u[rr][sub], __float2half2_rn(scale), a[rr >> 1][rr & 1], a[rr >> 1][2 + (rr & 1)]);
        }
#pragma unroll
        for (int t = 0; t < kTiles; ++t) {
          const uint2 b = *reinterpret_cast<const uint2 *>(xs + (8 * t + g) * kXStride + 2 * (16 * j + 4 * q));
#pragma unroll
          for (int r = 0; r < kRowTiles; ++r) mma_f16(acc[t][r], a[r], b.x, b.y);
        }
      }
    }
  };

  run_items<kStages, kTiles, kGated>(parts, acc, i0, i1, stages, tokens, issue, [&](int n, int64_t s) {
    if ((s >> 1) & 1) work(n, std::true_type{});  // an odd block
    else work(n, std::false_type{});
  });
}

template <int kTiles, bool kGated>
int blocks_per_sm() {
  static const int n = resident_blocks(few_token_q6k_kernel<kTiles, kGated>, smem_bytes(kTiles));
  return n;
}

}  // namespace

int q6k_blocks_per_sm(int64_t tokens, bool gated) {
  return visit_shape(token_tiles(tokens), gated, [](auto s) { return blocks_per_sm<decltype(s)::kTiles, decltype(s)::kGated>(); });
}

void launch_q6k(minfer_cuda_launch_cfg *cfg, const Plan &pl, const void *x16, int64_t k, int64_t tokens) {
  visit_shape(token_tiles(tokens), pl.parts.up != nullptr, [&](auto s) {
    constexpr int T = decltype(s)::kTiles;
    launch_kernel(cfg, few_token_q6k_kernel<T, decltype(s)::kGated>, unsigned(pl.grid), kWarps * 32, smem_bytes(T), pl.parts,
                  static_cast<const __half *>(x16), k, tokens);
    return 0;
  });
}

}  // namespace minfer::cuda::few_token
