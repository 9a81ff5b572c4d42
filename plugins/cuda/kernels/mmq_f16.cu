// plugins/cuda/kernels/mmq_f16.cu — prompt matmuls of Q4_0, Q8_0 and the K-quant weights
// (Q4_K, Q5_K, Q6_K: what Q4_K_M and Q5_K_M files are made of) on f16 tensor cores, the
// weights dequantized in registers from their blocks.
//
// Why not int8 MMQ (mmq.cu): its int32 products must be scaled per 32-value sub-block, token
// and row (two conversions, multiplies and the minimum's term per product); with the K types'
// tiles at two blocks an SM that is what bounded Q4_K_M prefill (ncu, 7B pp512: ~100-124 TOPS,
// issue slots 31-54% busy). Here a weight value becomes f16 once per tile with its scale and
// minimum in it ((q - 0) * d sc - dmin m: 1024 + q through the 0x6400 exponent trick, an exact
// subtraction, one FMA) and is used by all 64 tokens of the warp: nothing per token but the
// mma.m16n8k16 and its B load. x is f16 (converted once per launch).
//
// A block of 8 warps makes a 128 x 128 tile of y (weight rows x tokens), each warp 32 rows x 64
// tokens. A stage is half a super-block (128 values of k): per row its header (scales, d) and
// its half of the quantized values, 80 bytes (Q4_K), 112 (Q5_K), 144 (Q6_K), and 256 bytes of
// each token's x, copied by cp.async and double-buffered: the next stage is in flight while
// this one is multiplied. The mma's k order is mma_f16.cuh's: a lane's A for a row is one word of the
// packed values, its B one 8-byte load. Split-K and the tile order are mmq_parts.cuh's; a gate
// and an up weight share a tile (64 rows each) and leave act(gate) * up.
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "async_copy.cuh"
#include "glu.cuh"
#include "grid.cuh"
#include "minfer/blocks.h"
#include "minfer/dtype.h"
#include "mma_f16.cuh"
#include "mmq_parts.cuh"
#include "wgmma.cuh"

namespace minfer::cuda {
namespace {

constexpr int kRows = 128, kThreads = 256;
constexpr int kXStride = 288;  // a token's 128 f16 values of a stage + 32 bytes
static_assert((kXStride / 4) % 32 == 8, "tokens g of a half-warp's 8-byte loads on distinct banks");
constexpr int kOutStride = kRows + 4;  // the write-out's floats per token: tokens 2q of a warp's stores on distinct banks
constexpr int kMaxSplits = 8, kMinSplitStages = 4;
// Two stages (double-buffered) and two blocks an SM: measured on an H100 (7B pp512, two
// alternating rounds) Q4_K_M 16,371 t/s against 14,886 with three stages at one block an SM
// (the registers' bound then 255, not 128: no spills) and 14,845 with four; pp2048 16,449
// against 14,997. Q5_K spills 84 bytes at 128 registers, and still gains at pp2048 (14,950
// against 14,206), loses at pp128 (9,356 against 10,025). Q4_0 on this kernel rather than
// int8 MMQ: 7B pp512 12,523 -> 17,298, 0.5B 100,339 -> 100,564; Q8_0: 0.5B 81,764 ->
// 91,016, 1.5B 36,818 -> 47,072 (H100, two rounds each).
constexpr int kStages = 2, kMinBlocks = 2;
// The wgmma tile: 128 rows x kWgTokens tokens, a warpgroup's m64nNk16 all of them. 128 (64
// accumulators a thread, two blocks an SM) is what ran on an H100 (correct; 7B pp512 Q4_K_M
// 13,115 t/s against mma.sync's 16,506: see mmq_wgmma); 256 (m64n256k16, 128 accumulators,
// one block an SM: each dequantized value serving twice the tokens) compiles without spills,
// not yet measured.
constexpr int kWgTokens = 128;
template <bool kWg>
constexpr int kTileTokens = kWg ? kWgTokens : 128;
template <bool kWg>
constexpr int kTileBlocks = kWg && kWgTokens == 256 ? 1 : kMinBlocks;

// Per type: a row's bytes of a stage in shared memory (word strides that put the 8 rows g of a
// warp's word loads on distinct banks) and how the stage is copied: 16-byte pieces at block
// offsets (Q4_K, Q5_K) or Q6_K's 4-byte words (mma_f16.cuh).
template <class Block>
struct F16Type;
template <>
struct F16Type<minfer_block_q4_k> {
  static constexpr int kRowBytes = 80, kPieces = 5, kPieceBytes = 16, kQsAt = 16;  // header 16, the half's qs 64
  static constexpr int kAlign = 16;
  __device__ static int64_t stage_at(int64_t s) { return (s >> 1) * 144; }  // the stage's block
  // Block offset of piece p (shared offset 16 p) of half h.
  __device__ static int piece_src(int p, int h) { return p == 0 ? 0 : 16 + 64 * h + 16 * (p - 1); }
};
template <>
struct F16Type<minfer_block_q5_k> {
  static constexpr int kRowBytes = 112, kPieces = 7, kPieceBytes = 16, kQsAt = 48;  // header 16, qh 32, the half's qs 64
  static constexpr int kAlign = 16;
  __device__ static int64_t stage_at(int64_t s) { return (s >> 1) * 176; }
  __device__ static int piece_src(int p, int h) { return p < 3 ? 16 * p : 48 + 64 * h + 16 * (p - 3); }
};
template <>
struct F16Type<minfer_block_q6_k> {
  static constexpr int kRowBytes = 144, kPieces = 0;  // 36 words, 30 copied (q6k_half)
  static constexpr int kAlign = 4;
  static constexpr int kPieceBytes = 4, kQsAt = 0;  // (kQsAt: Q4_K's and Q5_K's, unused)
};
// Q4_0: a stage is four whole blocks (72 bytes, rows of k a multiple of 128 keep it on 8
// bytes), copied as nine 8-byte pieces into a row of 80.
template <>
struct F16Type<minfer_block_q4_0> {
  static constexpr int kRowBytes = 80, kPieces = 9, kPieceBytes = 8, kQsAt = 0;
  static constexpr int kAlign = 8;
  __device__ static int64_t stage_at(int64_t s) { return s * 72; }
};
// Q8_0 likewise: four blocks of 34 bytes, seventeen 8-byte pieces into a row of 144.
template <>
struct F16Type<minfer_block_q8_0> {
  static constexpr int kRowBytes = 144, kPieces = 17, kPieceBytes = 8, kQsAt = 0;
  static constexpr int kAlign = 8;
  __device__ static int64_t stage_at(int64_t s) { return s * 136; }
};
static_assert((F16Type<minfer_block_q4_k>::kRowBytes / 4) % 8 == 4 && (F16Type<minfer_block_q5_k>::kRowBytes / 4) % 8 == 4 &&
                  (F16Type<minfer_block_q6_k>::kRowBytes / 4) % 8 == 4 && (F16Type<minfer_block_q4_0>::kRowBytes / 4) % 8 == 4 &&
                  (F16Type<minfer_block_q8_0>::kRowBytes / 4) % 8 == 4,
              "rows g of a warp's word loads on distinct banks");

// kWg (warpgroup MMA, sm_90a): a stage's x as wgmma's core matrices, 8 tokens x 8 values each
// (128 contiguous bytes: token t, value v at (t / 8) kWgTokenStride + (v / 8) 128 + (t % 8) 16
// + (v % 8) 2), no padding: the tensor cores read them, not lanes.
constexpr int kWgTokenStride = 16 * 128;  // eight tokens' 128 values
template <class Block, bool kWg>
constexpr int stage_bytes() {
  return kRows * F16Type<Block>::kRowBytes + (kWg ? kTileTokens<kWg> / 8 * kWgTokenStride : kTileTokens<kWg> * kXStride);
}
template <class Block, bool kWg>
constexpr int smem_bytes() {
  return std::max(kStages * stage_bytes<Block, kWg>(), kTileTokens<kWg> * kOutStride * 4);
}

// kWg false: mma.sync, each warp 32 rows x 64 tokens (x read by the lanes, 8 bytes a B
// fragment). kWg true (Hopper): two warpgroups of 64 rows x all 128 tokens on
// wgmma.m64n128k16, A the same dequantized fragments (each warp 16 rows: half the dequantizing
// of mma.sync's tile, where two token warps dequantized each row), B read from shared memory
// by the tensor cores; x must then come in mma_f16.cuh's k order
// (minfer_cuda_convert_f32_f16_mma_order), since wgmma reads a 16-value run in order.
template <class Block, bool kGated, bool kWg>
__global__ void __launch_bounds__(kThreads, kTileBlocks<kWg>)
    mmq_f16_kernel(const __grid_constant__ MmqParts parts, const __half *x, int64_t k, int64_t tokens, int64_t row_tiles, int64_t token_tiles,
                   int64_t group_tiles) {
  wait_for_inputs();
  constexpr int kRR = kWg ? 2 : 4;  // a lane's rows (g, g + 8 of each of the warp's 16-row groups)
  constexpr int kG = kRR / 2;       // the warp's 16-row groups: A fragments per 16-value run
  constexpr int kTokens = kTileTokens<kWg>;
  using T = F16Type<Block>;
  constexpr bool kQ6 = std::is_same_v<Block, minfer_block_q6_k>, kQ5 = std::is_same_v<Block, minfer_block_q5_k>;
  constexpr bool kQ40 = std::is_same_v<Block, minfer_block_q4_0>, kQ80 = std::is_same_v<Block, minfer_block_q8_0>;
  constexpr int kBlockBytes = int(sizeof(Block));
  extern __shared__ __align__(16) uint8_t smem[];
  const auto wsm = [&](int buf) { return smem + buf * stage_bytes<Block, kWg>(); };
  const auto xsm = [&](int buf) { return wsm(buf) + kRows * T::kRowBytes; };
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int wm = warp & 3, wn = warp >> 2;  // mma.sync: this warp's rows 32 wm.., tokens 64 wn..; wgmma: rows 64 wn + 16 wm..
  const int64_t stages = k / 128, row_bytes = k / (kQ40 || kQ80 ? 32 : 256) * kBlockBytes;
  const int splits = parts.splits;

  for (int64_t unit = blockIdx.x; unit < row_tiles * token_tiles * splits; unit += gridDim.x) {
    const int64_t tile = unit / splits;
    const int split = int(unit - tile * splits);
    const int64_t s_begin = stages * split / splits, s_end = stages * (split + 1) / splits;
    const TileAt at = tile_at(tile, row_tiles, token_tiles, group_tiles);
    const int p = at.row_tile < parts.tiles_end[0] ? 0 : at.row_tile < parts.tiles_end[1] ? 1 : 2;
    constexpr int kPartRows = kGated ? kRows / 2 : kRows;  // a part's rows in the tile
    const int64_t row0 = (at.row_tile - (p == 0 ? 0 : pick(parts.tiles_end, p - 1))) * kPartRows, m = pick(parts.m, p);
    const int64_t tok0 = at.token_tile * kTokens;
    // Tile row r's weight row (rows past the part read its last row: their sums are not written).
    const auto row_src = [&](int r) {
      const int pr = kGated ? r % kPartRows : r;
      const int64_t o = row0 + pr < m ? row0 + pr : m - 1;
      return static_cast<const uint8_t *>(kGated ? (r < kPartRows ? parts.w[0] : parts.w[1]) : pick(parts.w, p)) + o * row_bytes;
    };

    // The copies of one stage into buffer `buf`: the weights' pieces (the assignment of pieces
    // to threads is the same every stage: their rows' addresses are kept), then x's 16 pieces
    // of each token (zeros past the tokens).
    // Q6_K and the 8-byte pieces (Q4_0, Q8_0): eight lanes a row, four rows a thread (warp w's
    // rows 16 w.. for Q6_K's words; rows t / 8 + 32 i for pieces); the 16-byte pieces (Q4_K,
    // Q5_K): consecutive threads on consecutive pieces, up to three a thread. Either way a
    // thread keeps four or fewer rows' addresses across the stages.
    constexpr bool kEight = kQ6 || T::kPieceBytes == 8;
    constexpr int kCopies = kEight ? 4 : (kRows * T::kPieces + kThreads - 1) / kThreads;
    const uint8_t *src[kCopies];
    int dst[kCopies], off[kCopies][2];  // shared offset; source offset in the block of halves 0, 1
    if constexpr (kQ6) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int r = 16 * warp + 4 * j + (lane >> 3);
        src[j] = row_src(r), dst[j] = r * T::kRowBytes + 4 * (lane & 7);
        // off[i]: the source offsets of word lane % 8 + 8 i (four rounds i, as there are four rows j)
        off[j][0] = q6k_half::piece_offset((lane & 7) + 8 * j, 0), off[j][1] = q6k_half::piece_offset((lane & 7) + 8 * j, 1);
      }
    } else if constexpr (kEight) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int r = (threadIdx.x >> 3) + 32 * j;
        src[j] = row_src(r) + 8 * (threadIdx.x & 7), dst[j] = r * T::kRowBytes + 8 * (threadIdx.x & 7);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kCopies; ++j) {
        const int c = threadIdx.x + j * kThreads, r = c / T::kPieces, piece = c % T::kPieces;
        src[j] = c < kRows * T::kPieces ? row_src(r) : nullptr;
        dst[j] = r * T::kRowBytes + T::kPieceBytes * piece;
        off[j][0] = T::piece_src(piece, 0), off[j][1] = T::piece_src(piece, 1);
      }
    }
    // x: the thread's 16-byte piece xp of tokens xt + 16 j. mma.sync: a token's pieces on
    // consecutive threads; wgmma: eight tokens' same piece on consecutive threads (a core
    // matrix row each: 128 contiguous bytes of shared memory).
    const int xt = kWg ? 8 * (threadIdx.x >> 7) + (threadIdx.x & 7) : threadIdx.x >> 4, xp = kWg ? (threadIdx.x >> 3) & 15 : threadIdx.x & 15;
    const auto x_dst = [&](int t) { return kWg ? (t >> 3) * kWgTokenStride + 128 * xp + 16 * (t & 7) : t * kXStride + 16 * xp; };
    const __half *xrow = x + (tok0 + xt) * k + 8 * xp;
    const auto issue = [&](int64_t s, int buf) {
      if (s < s_end) {
        const int64_t blk = s >> 1;
        const int h = int(s & 1);
        uint8_t *ws = wsm(buf);
        if constexpr (kQ6) {
          // Row j's word lane % 8 + 8 i, from the block's 4-byte floor.
          const int64_t floor4 = blk * kBlockBytes - (blk & 1) * 2;
#pragma unroll
          for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i)
              if (i < 3 || (lane & 7) < q6k_half::kCopyWords - 24) cp_async_zfill<4>(ws + dst[j] + 32 * i, src[j] + floor4 + (h ? off[i][1] : off[i][0]), 4);
        } else if constexpr (kEight) {  // row j's pieces lane % 8 + 8 p
#pragma unroll
          for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int p = 0; p < (T::kPieces + 7) / 8; ++p)
              if ((T::kPieces % 8 == 0 || p < T::kPieces / 8 || int(threadIdx.x & 7) < T::kPieces % 8))
                cp_async_zfill<8>(ws + dst[j] + 64 * p, src[j] + T::stage_at(s) + 64 * p, 8);
        } else {
#pragma unroll
          for (int j = 0; j < kCopies; ++j) {
            if (!src[j]) break;
            cp_async16(ws + dst[j], src[j] + T::stage_at(s) + (h ? off[j][1] : off[j][0]));
          }
        }
        uint8_t *xs = xsm(buf);
#pragma unroll
        for (int j = 0; j < kTokens / 16; ++j) {
          const bool live = tok0 + xt + 16 * j < tokens;
          cp_async16_zfill(xs + x_dst(xt + 16 * j), live ? xrow + 16 * j * k + s * 128 : x, live ? 16 : 0);
        }
      }
      cp_async_commit();  // empty groups past the range keep the wait count simple
    };

    // mma.sync: acc[4 (8 ri + tj) + e] is row 32 wm + 16 ri + g + 8 (e / 2), token 64 wn + 8 tj + 2 q + e % 2;
    // wgmma: acc[4 tj + e] is row 64 wn + 16 wm + g + 8 (e / 2), token 8 tj + 2 q + e % 2.
    float acc[kWg ? kTokens / 2 : 64] = {};
    // The lane's rows: rr = 2 ri + hh is row 32 wm + 16 ri + g + 8 hh (wgmma: 64 wn + 16 wm + g + 8 hh).
    const auto lane_row = [&](int rr) { return (kWg ? 64 * wn + 16 * wm : 32 * wm + 16 * (rr >> 1)) + g + 8 * (rr & 1); };
    const auto mma_chunk = [&](const uint32_t (&a)[kG][4], const uint8_t *xs, int value) {  // value: the chunk's lane value in the stage
      if constexpr (kWg) {
        wgmma_fence();  // a was just written
        const uint64_t b = wgmma_desc(xs + (value >> 4) * 256, 128, kWgTokenStride);
        if constexpr (kTokens == 256) wgmma_m64n256k16(acc, a[0], b);
        else wgmma_m64n128k16(acc, a[0], b);
        wgmma_commit();
        wgmma_wait<1>();  // the one before is done: its A registers are free (two in flight, not a stage's eight)
      } else {
#pragma unroll
        for (int tj = 0; tj < 8; ++tj) {
          const uint2 b = *reinterpret_cast<const uint2 *>(xs + (64 * wn + 8 * tj + g) * kXStride + 2 * value);
#pragma unroll
          for (int ri = 0; ri < kG; ++ri) mma_f16(*reinterpret_cast<float(*)[4]>(acc + 4 * (8 * ri + tj)), a[ri], b.x, b.y);
        }
      }
    };

    // Q4_K, Q5_K: half h holds sub-blocks 4h..4h+3 of 32 values (scale and minimum each);
    // sub-block i of the half is the low (i even) or high nibbles of qs bytes 32 (i / 2)...
    const auto work_k = [&](int buf, int h) {
      const uint8_t *ws = wsm(buf), *xs = xsm(buf);
      const __half2 k1024 = __float2half2_rn(1024.0f);
      __half2 sc[kRR][2], mn[kRR][2];  // [rr][pair]: d sc and -dmin m of sub-blocks (0, 1), (2, 3)
      uint32_t qh[kRR][2];             // Q5_K: the lane's qh words (chunks 0, 1)
#pragma unroll
      for (int rr = 0; rr < kRR; ++rr) {
        const uint32_t *hw = reinterpret_cast<const uint32_t *>(ws + lane_row(rr) * T::kRowBytes);
        const uint32_t dd = hw[0], s0 = hw[1], s1 = hw[2], s2 = hw[3];
        // The half's four 6-bit scales and minima, a byte each (get_scale_min_k4's packing).
        const uint32_t scw = h ? (s2 & 0x0F0F0F0Fu) | ((s0 >> 2) & 0x30303030u) : s0 & 0x3F3F3F3Fu;
        const uint32_t mw = h ? ((s2 >> 4) & 0x0F0F0F0Fu) | ((s1 >> 2) & 0x30303030u) : s1 & 0x3F3F3F3Fu;
        const __half2 d2 = __half2half2(__ushort_as_half(uint16_t(dd))), dm2 = __hneg2(__half2half2(__ushort_as_half(uint16_t(dd >> 16))));
        sc[rr][0] = __hmul2(__hsub2(bytes_1024<false>(scw), k1024), d2), sc[rr][1] = __hmul2(__hsub2(bytes_1024<true>(scw), k1024), d2);
        mn[rr][0] = __hmul2(__hsub2(bytes_1024<false>(mw), k1024), dm2), mn[rr][1] = __hmul2(__hsub2(bytes_1024<true>(mw), k1024), dm2);
        if constexpr (kQ5) qh[rr][0] = hw[4 + q], qh[rr][1] = hw[8 + q];
      }
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        uint32_t wd[kRR][2];
#pragma unroll
        for (int rr = 0; rr < kRR; ++rr)
#pragma unroll
          for (int c = 0; c < 2; ++c) wd[rr][c] = *reinterpret_cast<const uint32_t *>(ws + lane_row(rr) * T::kRowBytes + T::kQsAt + 32 * jj + 16 * c + 4 * q);
#pragma unroll
        for (int nib = 0; nib < 2; ++nib) {
          const int i = 2 * jj + nib;
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            uint32_t a[kG][4];
#pragma unroll
            for (int rr = 0; rr < kRR; ++rr) {
              uint32_t v = nib ? (wd[rr][c] >> 4) & 0x0F0F0F0Fu : wd[rr][c] & 0x0F0F0F0Fu;
              if constexpr (kQ5) v |= ((qh[rr][c] >> (4 * h + i)) & 0x01010101u) << 4;
              const __half2 s = i & 1 ? __high2half2(sc[rr][i >> 1]) : __low2half2(sc[rr][i >> 1]);
              const __half2 mm = i & 1 ? __high2half2(mn[rr][i >> 1]) : __low2half2(mn[rr][i >> 1]);
              a[rr >> 1][rr & 1] = as_word(__hfma2(__hsub2(bytes_1024<false>(v), k1024), s, mm));
              a[rr >> 1][2 + (rr & 1)] = as_word(__hfma2(__hsub2(bytes_1024<true>(v), k1024), s, mm));
            }
            mma_chunk(a, xs, 32 * i + 16 * c + 4 * q);
          }
        }
      }
    };

    // Q6_K: half h's 8 scales cover 16 values each; values l, l + 32, l + 64, l + 96 (l = l0 +
    // 4q..) come from a lane's words of ql's two runs and of qh (q6k_half::unpack).
    const auto work_q6 = [&](int buf, auto odd) {
      using namespace q6k_half;
      constexpr bool kOdd = decltype(odd)::value;
      const uint8_t *ws = wsm(buf), *xs = xsm(buf);
      const __half2 k1152 = __float2half2_rn(1152.0f);
      const uint32_t *row[kRR];
      __half2 sc[kRR][4];  // [rr][pair]: d sc of scales (0, 1), (2, 3), ...
#pragma unroll
      for (int rr = 0; rr < kRR; ++rr) {
        row[rr] = reinterpret_cast<const uint32_t *>(ws + lane_row(rr) * T::kRowBytes);
        const __half2 d2 = __float2half2_rn(scale_d<kOdd>(row[rr]));
#pragma unroll
        for (int w = 0; w < 2; ++w) {
          const uint32_t u = piece_word<kOdd>(row[rr], kScWord, 4 * w) ^ 0x80808080u;  // int8 + 128
          sc[rr][2 * w] = __hmul2(__hsub2(bytes_1024<false>(u), k1152), d2);
          sc[rr][2 * w + 1] = __hmul2(__hsub2(bytes_1024<true>(u), k1152), d2);
        }
      }
#pragma unroll
      for (int l0 = 0; l0 < 32; l0 += 16) {
        uint32_t u[kRR][4];
#pragma unroll
        for (int rr = 0; rr < kRR; ++rr)
          unpack(piece_word<kOdd>(row[rr], kQlWord, l0 + 4 * q), piece_word<kOdd>(row[rr], kQlWord, 32 + l0 + 4 * q),
                 piece_word<kOdd>(row[rr], kQhWord, l0 + 4 * q), u[rr]);
#pragma unroll
        for (int sub = 0; sub < 4; ++sub) {  // scale l0 / 16 + 2 sub: pair sub, its low or high half
          uint32_t a[kG][4];
#pragma unroll
          for (int rr = 0; rr < kRR; ++rr)
            dequant6(u[rr][sub], l0 ? __high2half2(sc[rr][sub]) : __low2half2(sc[rr][sub]), a[rr >> 1][rr & 1], a[rr >> 1][2 + (rr & 1)]);
          mma_chunk(a, xs, 32 * sub + l0 + 4 * q);
        }
      }
    };

    // Q4_0: block b of the stage (its 18 bytes at 18 b) has one scale; values i and 16 + i
    // are the nibbles of qs byte i, so a 16-value chunk is the low (c = 0) or high nibbles of
    // the 16 bytes. Even blocks' qs start 2 bytes into a word: their words are read across two.
    const auto work_q40 = [&](int buf) {
      const uint8_t *ws = wsm(buf), *xs = xsm(buf);
      const __half2 k1032 = __float2half2_rn(1032.0f);
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        __half2 d2[kRR];
        uint32_t wd[kRR];
#pragma unroll
        for (int rr = 0; rr < kRR; ++rr) {
          const uint8_t *row = ws + lane_row(rr) * T::kRowBytes;
          const uint32_t *rw = reinterpret_cast<const uint32_t *>(row);
          d2[rr] = __half2half2(*reinterpret_cast<const __half *>(row + 18 * b));
          wd[rr] = b % 2 == 0 ? __byte_perm(rw[(18 * b) / 4 + q], rw[(18 * b) / 4 + q + 1], 0x5432) : rw[(18 * b + 2) / 4 + q];
        }
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          uint32_t a[kG][4];
#pragma unroll
          for (int rr = 0; rr < kRR; ++rr) {
            const uint32_t v = c ? (wd[rr] >> 4) & 0x0F0F0F0Fu : wd[rr] & 0x0F0F0F0Fu;
            a[rr >> 1][rr & 1] = as_word(__hmul2(__hsub2(bytes_1024<false>(v), k1032), d2[rr]));
            a[rr >> 1][2 + (rr & 1)] = as_word(__hmul2(__hsub2(bytes_1024<true>(v), k1032), d2[rr]));
          }
          mma_chunk(a, xs, 32 * b + 16 * c + 4 * q);
        }
      }
    };

    // Q8_0: block b of the stage (34 bytes at 34 b) has one scale; a 16-value chunk c is qs
    // bytes 16 c.., a lane's four values one word (even blocks' qs 2 bytes into a word, as
    // Q4_0's), int8 + 128 through the 0x6400 trick.
    const auto work_q80 = [&](int buf) {
      const uint8_t *ws = wsm(buf), *xs = xsm(buf);
      const __half2 k1152 = __float2half2_rn(1152.0f);
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        __half2 d2[kRR];
#pragma unroll
        for (int rr = 0; rr < kRR; ++rr) d2[rr] = __half2half2(*reinterpret_cast<const __half *>(ws + lane_row(rr) * T::kRowBytes + 34 * b));
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          uint32_t a[kG][4];
#pragma unroll
          for (int rr = 0; rr < kRR; ++rr) {
            const uint32_t *rw = reinterpret_cast<const uint32_t *>(ws + lane_row(rr) * T::kRowBytes);
            const int at = 34 * b + 2 + 16 * c + 4 * q;  // the lane's first value byte
            const uint32_t w = (b % 2 == 0 ? __byte_perm(rw[at / 4], rw[at / 4 + 1], 0x5432) : rw[at / 4]) ^ 0x80808080u;
            a[rr >> 1][rr & 1] = as_word(__hmul2(__hsub2(bytes_1024<false>(w), k1152), d2[rr]));
            a[rr >> 1][2 + (rr & 1)] = as_word(__hmul2(__hsub2(bytes_1024<true>(w), k1152), d2[rr]));
          }
          mma_chunk(a, xs, 32 * b + 16 * c + 4 * q);
        }
      }
    };

#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) issue(s_begin + i, i);
    for (int64_t s = s_begin; s < s_end; ++s) {
      const int buf = int((s - s_begin) % kStages);
      cp_async_wait<kStages - 2>();  // stage s has landed (this thread's copies) ...
      if constexpr (kWg) fence_proxy_async_shared();  // ... visible to wgmma's reads too
      __syncthreads();               // ... everyone's; and stage s - 1's buffer is free again
      issue(s + kStages - 1, int((s - s_begin + kStages - 1) % kStages));
      if constexpr (kQ6) {
        if ((s >> 1) & 1) work_q6(buf, std::true_type{});  // an odd block: 2 bytes into its words
        else work_q6(buf, std::false_type{});
      } else if constexpr (kQ40) {
        work_q40(buf);
      } else if constexpr (kQ80) {
        work_q80(buf);
      } else {
        work_k(buf, int(s & 1));
      }
      if constexpr (kWg) wgmma_wait<0>();  // the stage's products are done with its buffer (and acc is written)
    }
    cp_async_wait<0>();
    __syncthreads();

    // Write-out through shared memory, so that consecutive threads write consecutive rows of a
    // token: out[token][row] (c0, c1: row g, tokens 2q, 2q + 1; c2, c3: row g + 8).
    float *out = reinterpret_cast<float *>(smem);
#pragma unroll
    for (int i = 0; i < (kWg ? kTokens / 8 : 16); ++i)  // mma.sync: i = 8 ri + tj; wgmma: i = tj
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int t = (kWg ? 8 * i : 64 * wn + 8 * (i & 7)) + 2 * q + (e & 1), r = lane_row(kWg ? (e >> 1) : 2 * (i >> 3) + (e >> 1));
        out[t * kOutStride + r] = acc[4 * i + e];
      }
    __syncthreads();
    if constexpr (kGated) {
      float *y = parts.y[0];
      for (int idx = threadIdx.x; idx < kPartRows * kTokens; idx += kThreads) {
        const int t = idx / kPartRows, r = idx % kPartRows;
        const int64_t row = row0 + r, tok = tok0 + t;
        if (row < m && tok < tokens) y[tok * m + row] = glu(parts.act, out[t * kOutStride + r], out[t * kOutStride + kPartRows + r]);
      }
    } else {
      // A split's partial sums go to its own copy of the parts' outputs; launch_mmq_split_sum adds them.
      float *const y = splits > 1 ? parts.partials + split * parts.partial_stride + pick(parts.partial_off, p) : pick(parts.y, p);
      const float *const add = splits > 1 ? nullptr : pick(parts.add, p);
      const int add_broadcast = pick(parts.add_broadcast, p);
      for (int idx = threadIdx.x; idx < kRows * kTokens; idx += kThreads) {
        const int t = idx / kRows, r = idx % kRows;
        const int64_t row = row0 + r, tok = tok0 + t;
        if (row < m && tok < tokens) y[tok * m + row] = out[t * kOutStride + r] + (add ? add[add_broadcast ? row : tok * m + row] : 0.0f);
      }
    }
    __syncthreads();  // shared memory is rewritten by the next tile
  }
}

int64_t row_tiles_of(const minfer_cuda_mmq_part *parts, int n_parts, bool gated) {
  int64_t tiles = 0;
  for (int i = 0; i < (gated ? 1 : n_parts); ++i) tiles += (parts[i].m + (gated ? kRows / 2 : kRows) - 1) / (gated ? kRows / 2 : kRows);
  return tiles;
}

int plan_f16_splits(const minfer_cuda_mmq_part *parts, int n_parts, int64_t k, int64_t tokens, int sm_count, bool can_split, bool wg) {
  const int tile_tokens = wg ? kTileTokens<true> : kTileTokens<false>;
  const int64_t tiles = row_tiles_of(parts, n_parts, false) * ((tokens + tile_tokens - 1) / tile_tokens);
  return plan_splits(tiles, k / 128, int64_t(sm_count > 0 ? sm_count : 1) * (wg ? kTileBlocks<true> : kTileBlocks<false>), can_split, kMaxSplits,
                     kMinSplitStages).splits;
}

template <class Block, bool kGated, bool kWg>
cudaError_t launch_tiles(minfer_cuda_launch_cfg *cfg, const MmqParts &parts, const __half *x, int64_t k, int64_t tokens, int64_t row_tiles,
                         int64_t token_tiles, int64_t group_tiles) {
  const auto kernel = mmq_f16_kernel<Block, kGated, kWg>;
  constexpr int smem = smem_bytes<Block, kWg>();
  if (const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem); err != cudaSuccess) return err;
  const int64_t units = row_tiles * token_tiles * parts.splits;
  launch_kernel(cfg, kernel, unsigned(units < cfg->max_blocks ? units : cfg->max_blocks), kThreads, smem, parts, x, k, tokens, row_tiles,
                token_tiles, group_tiles);
  return cudaSuccess;
}

template <class Block>
cudaError_t launch(minfer_cuda_launch_cfg *cfg, const minfer_cuda_mmq_part *in, int n_parts, bool gated, int32_t act, const void *x16, int64_t k,
                   int64_t tokens, int32_t dtype, const minfer_cuda_mmq_split *split, bool wg) {
  const int splits = gated ? 1 : plan_f16_splits(in, n_parts, k, tokens, split ? split->sm_count : 0, split && split->partials, wg);
  const int64_t kTokens = wg ? kTileTokens<true> : kTileTokens<false>;
  const MmqParts parts = make_mmq_parts(in, n_parts, gated ? kRows / 2 : kRows, gated, tokens, splits, split ? split->partials : nullptr, act);
  const int64_t row_tiles = row_tiles_of(in, n_parts, gated), token_tiles = (tokens + kTokens - 1) / kTokens;
  // Token tiles per group: as many as keep their x within ~16 MiB of the L2.
  const int64_t group_tiles = std::max<int64_t>(1, std::min<int64_t>(token_tiles, (int64_t(16) << 20) / (kTokens * k * 2)));
  const auto *x = static_cast<const __half *>(x16);
  const auto run = [&](auto wg_tag) {
    constexpr bool kWg = decltype(wg_tag)::value;
    return gated ? launch_tiles<Block, true, kWg>(cfg, parts, x, k, tokens, row_tiles, token_tiles, group_tiles)
                 : launch_tiles<Block, false, kWg>(cfg, parts, x, k, tokens, row_tiles, token_tiles, group_tiles);
  };
  const cudaError_t err = wg ? run(std::true_type{}) : run(std::false_type{});
  if (err != cudaSuccess) return err;
  static const char *const names[2][4] = {
      {"mmq_f16_kernel", "mmq_f16_kernel (split k)", "mmq_f16_kernel (gate, up, silu)", "mmq_f16_kernel (gate, up, gelu)"},
      {"mmq_f16_kernel (wgmma)", "mmq_f16_kernel (wgmma, split k)", "mmq_f16_kernel (wgmma; gate, up, silu)", "mmq_f16_kernel (wgmma; gate, up, gelu)"}};
  const char *name = names[wg][gated ? (act == MINFER_CUDA_GLU_GELU ? 3 : 2) : splits > 1 ? 1 : 0];
  if (splits > 1) {
    if (const cudaError_t e = launched(cfg, name, dtype); e != cudaSuccess) return e;
    return launch_mmq_split_sum(cfg, parts, tokens, dtype);
  }
  return launched(cfg, name, dtype);
}

template <class F>
void visit_f16_block(int32_t dtype, F &&f) {
  switch (dtype) {
    case MINFER_DTYPE_Q4_0: f(minfer_block_q4_0{}); break;
    case MINFER_DTYPE_Q8_0: f(minfer_block_q8_0{}); break;
    case MINFER_DTYPE_Q4_K: f(minfer_block_q4_k{}); break;
    case MINFER_DTYPE_Q5_K: f(minfer_block_q5_k{}); break;
    case MINFER_DTYPE_Q6_K: f(minfer_block_q6_k{}); break;
    default: break;
  }
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" int minfer_cuda_mmq_f16_supported(int32_t dtype, int64_t k) {
  // Q6_K: rows of an even number of blocks start on a 4-byte word (see mma_f16.cuh).
  if (k <= 0) return 0;
  switch (dtype) {
    case MINFER_DTYPE_Q4_0:
    case MINFER_DTYPE_Q8_0: return k % 128 == 0;  // a stage: four whole blocks
    case MINFER_DTYPE_Q4_K:
    case MINFER_DTYPE_Q5_K: return k % 256 == 0;
    case MINFER_DTYPE_Q6_K: return k % 512 == 0;
    default: return 0;
  }
}

extern "C" int minfer_cuda_mmq_f16_aligned(int32_t dtype, const void *w) {
  int align = 16;
  visit_f16_block(dtype, [&](auto tag) { align = F16Type<decltype(tag)>::kAlign; });
  return reinterpret_cast<uintptr_t>(w) % align == 0;
}

extern "C" size_t minfer_cuda_mmq_f16_partials_bytes(int32_t dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts, int64_t k, int64_t tokens,
                                                     int32_t sm_count, int32_t wgmma) {
  if (!minfer_cuda_mmq_f16_supported(dtype, k)) return 0;
  return mmq_partials_bytes(parts, n_parts, tokens, plan_f16_splits(parts, n_parts, k, tokens, sm_count, true, wgmma != 0));
}

// Whether this GPU runs the sm_90a code (a Hopper GPU, and the plugin built for sm_90a):
// one probe launch, synchronous, so call it before any graph capture.
__global__ void wgmma_probe_kernel(int *out) { *out = MINFER_WGMMA; }

extern "C" int minfer_cuda_wgmma_available(void) {
  int *flag = nullptr, got = 0;
  if (cudaMalloc(&flag, sizeof(int)) != cudaSuccess) return 0;
  wgmma_probe_kernel<<<1, 1>>>(flag);
  const bool ok = cudaGetLastError() == cudaSuccess && cudaMemcpy(&got, flag, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(flag);
  return ok && got == 1;
}

extern "C" cudaError_t minfer_cuda_mmq_f16(minfer_cuda_launch_cfg *cfg, int32_t dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts,
                                           const void *up, int32_t act, const void *x16, int64_t k, int64_t tokens,
                                           const minfer_cuda_mmq_split *split, int32_t wgmma) {
  if (!minfer_cuda_mmq_f16_supported(dtype, k) || n_parts < 1 || n_parts > kMinferCudaMmqMaxParts || (up && n_parts != 1) || tokens < 1)
    return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(x16) % 16 || (up && !minfer_cuda_mmq_f16_aligned(dtype, up))) return cudaErrorMisalignedAddress;
  for (int i = 0; i < n_parts; ++i)
    if (!minfer_cuda_mmq_f16_aligned(dtype, parts[i].w)) return cudaErrorMisalignedAddress;
  cudaError_t err = cudaErrorNotSupported;
  visit_f16_block(dtype, [&](auto tag) {
    using Block = decltype(tag);
    if (up) {
      const minfer_cuda_mmq_part gated[2] = {parts[0], {up, parts[0].y, nullptr, parts[0].m, 0}};
      err = launch<Block>(cfg, gated, 2, true, act, x16, k, tokens, dtype, nullptr, wgmma != 0);
    } else {
      err = launch<Block>(cfg, parts, n_parts, false, act, x16, k, tokens, dtype, split, wgmma != 0);
    }
  });
  return err;
}
