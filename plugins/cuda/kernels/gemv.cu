// plugins/cuda/kernels/gemv.cu — the one-token matmul (decode): y = W x for the block types of
// qblock.cuh, x in f32 quantized by the kernel itself into shared memory (no launch before
// it), dp4a dot products (int8_dot.cuh). One launch can take up to three weights sharing x
// (a layer's Q, K, V with their biases), or a gate and up weight with their activation (SwiGLU, GeGLU), and an
// RMS norm of x folded in.
#include <algorithm>
#include <type_traits>

#include "async_copy.cuh"
#include "glu.cuh"
#include "grid.cuh"
#include "int8_dot.cuh"
#include "minfer/blocks.h"
#include "minfer/dtype.h"
#include "reduce.cuh"


namespace minfer::cuda {
namespace {

constexpr int kWarps = 8;  // rows (or chunks) in flight per 256-thread block

// Each block quantizes x into shared memory itself, then its warps take rows (a lane whole
// sub-blocks, as mmvq.cu's kernel), or 2 KiB chunks of rows (gemv_staged_rows). Quantizing:
// four lanes per 32 values (eight each, two shuffles for the max and the sum), so a warp does
// eight blocks at a time and a long row (ffn_down's 4864) costs a few steps. Rows: each lane loads
// up to kUnroll of its blocks before using any, so enough bytes are in flight to keep memory
// busy when a row has many blocks. The grid is capped near the GPU's resident blocks: a block
// meets many rows of a long weight (the lm_head) and quantizes x once for them.
// `add` (optional): y[o] = W[o].x + add[o] (a bias, or the residual of a one-token step).
constexpr int kUnroll = 4;

// After quantize_to_shared: the RMS norm's scale 1/sqrt(mean(x^2) + eps) from the threads'
// parts (1 without a norm). Contains the block barrier that makes xs visible.
__device__ __forceinline__ float norm_scale(float ss, bool norm, int64_t k, float eps) {
  __shared__ float warp_ss[32];
  if (norm) {
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) warp_ss[threadIdx.x >> 5] = ss;
  }
  __syncthreads();
  if (!norm) return 1.0f;
  float total = 0;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) total += warp_ss[w];
  return rsqrtf(total / float(k) + eps);
}

// kUnroll sub-blocks of a row from s0 on, 32 apart (one lane's share of a stretch of the row).
template <class Block>
__device__ __forceinline__ void load_subs(const Block *row, int64_t s0, int64_t ns, SubBlock (&s)[kUnroll]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
    if (s0 + 32 * u < ns) gemv_unpack_sub(row, s0 + 32 * u, s[u]);
}

// W[o] . xs for one row, kUnroll sub-blocks per lane in flight; `first` holds the lane's
// first kUnroll sub-blocks, loaded by the caller before x was ready.
template <class Block>
__device__ __forceinline__ float row_dot(const Block *row, const minfer_cuda_q8_act *xs, int64_t ns, int lane,
                                         const SubBlock (&first)[kUnroll]) {
  float acc = 0;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
    if (lane + 32 * u < ns) acc += gemv_dot<Block>(first[u], xs[lane + 32 * u]);
  for (int64_t s0 = lane + 32 * kUnroll; s0 < ns; s0 += 32 * kUnroll) {
    SubBlock s[kUnroll];
    load_subs(row, s0, ns, s);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (s0 + 32 * u < ns) acc += gemv_dot<Block>(s[u], xs[s0 + 32 * u]);
  }
  return warp_sum(acc);
}

// The products of one launch: rows [end[i-1], end[i]) of the grid's row range are part i's.
struct GemvParts {
  const void *w[kMinferCudaGemvMaxParts];
  float *y[kMinferCudaGemvMaxParts];
  const float *add[kMinferCudaGemvMaxParts];
  int64_t end[kMinferCudaGemvMaxParts];
  int n;
  const float *norm_w;  // RMS norm of x first (its weights), or NULL
  float eps;
  int first_b;  // parts from this one on are of the second block type (gemv_mixed_kernel), else n
  int act;      // with an up weight: the gate's activation (MINFER_CUDA_GLU_*)
  int group;    // staged rows: consecutive rows a chunk holds (one part of one type, short rows), else 1
};

// Part p's entry of an array of the kernel parameter, by selects: indexing it with a run-time
// p would copy the whole parameter struct to local memory.
template <class T>
__device__ __forceinline__ T pick(const T (&a)[kMinferCudaGemvMaxParts], int p) {
  static_assert(kMinferCudaGemvMaxParts == 3, "pick() spells out three parts");
  return p == 0 ? a[0] : p == 1 ? a[1] : a[2];
}

// Row o of the launch: part p's row r.
template <class Block>
__device__ __forceinline__ const Block *part_row(const GemvParts &parts, int64_t o, int64_t nb, int &p, int64_t &r) {
  p = o < parts.end[0] ? 0 : o < parts.end[1] ? 1 : 2;
  r = o - (p == 0 ? 0 : p == 1 ? parts.end[0] : parts.end[1]);
  return static_cast<const Block *>(pick(parts.w, p)) + r * nb;
}
// The same row as a BlockB row (rows of nb blocks of that type).
template <class BlockB>
__device__ __forceinline__ const BlockB *part_row_as(const GemvParts &parts, int p, int64_t r, int64_t nb) {
  return static_cast<const BlockB *>(pick(parts.w, p)) + r * nb;
}

// y_p[r] = v (+ add_p[r]).
__device__ __forceinline__ void store_row(const GemvParts &parts, int p, int64_t r, float v) {
  const float *add = pick(parts.add, p);
  pick(parts.y, p)[r] = add ? v + add[r] : v;
}

// Rows of at most 32 sub-blocks (k <= 1024: a 0.5B model's projections): one load round per
// row would leave most of memory's latency exposed, so a warp takes kShortRows rows at once
// (half as many gate/up pairs), a lane holding its one sub-block of each.
constexpr int kShortRows = kUnroll;

// BlockB: the block type of parts first_b.. (a layer's V stored in another type than its Q and
// K, as the _M mixes do; the same sub-blocks per block as BlockA); BlockA for the others.
template <class Block, bool kGated, class BlockB = Block>
__device__ __forceinline__ void gemv_short_rows(const GemvParts &parts, const Block *up, const float *x, int64_t ns, int64_t nb,
                                                minfer_cuda_q8_act *xs) {
  static_assert(QBlock<Block>::kSubs == QBlock<BlockB>::kSubs, "mixed parts need the same rows of blocks");
  constexpr bool kMixed = !std::is_same_v<Block, BlockB>;
  constexpr bool kTwo = QBlock<Block>::kTwoScales || QBlock<BlockB>::kTwoScales, kOff = QBlock<Block>::kOffset || QBlock<BlockB>::kOffset;
  constexpr bool kHalfOff = kTwoOffsets<Block> || kTwoOffsets<BlockB>;
  constexpr int R = kGated ? kShortRows / 2 : kShortRows;
  const int lane = threadIdx.x & 31;
  const int64_t rows = parts.end[parts.n - 1], stride = int64_t(gridDim.x) * kWarps;
  const int64_t t0 = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  SubBlock s[kShortRows];
  int pr[R];
  int64_t rr[R];
  const auto load = [&](int64_t t) {
#pragma unroll
    for (int u = 0; u < R; ++u) {
      pr[u] = 0, rr[u] = 0;
      if (t * R + u >= rows) continue;
      const Block *row = part_row<Block>(parts, t * R + u, nb, pr[u], rr[u]);
      if (lane < ns) {
        if (kMixed && pr[u] >= parts.first_b) unpack_sub(part_row_as<BlockB>(parts, pr[u], rr[u], nb), lane, s[u]);
        else if (kMixed) unpack_sub(row, lane, s[u]);  // two types: both signed (sub_dot_as)
        else gemv_unpack_sub(row, lane, s[u]);
        if (kGated) gemv_unpack_sub(up + rr[u] * nb, lane, s[R + u]);
      }
    }
  };
  if (t0 * R < rows) load(t0);
  wait_for_inputs();  // the first rows (weights: no kernel writes them) load during the previous kernel's tail
  const float scale = norm_scale(quantize_to_shared<1>(x, parts.norm_w, ns, xs), parts.norm_w != nullptr, ns * 32, parts.eps);
  for (int64_t t = t0; t * R < rows; t += stride) {
    if (t != t0) load(t);
    if ((t + stride) * R >= rows) release_dependents();  // this warp's last rows are loading
#pragma unroll
    for (int u = 0; u < R; ++u) {
      const bool live = t * R + u < rows;
      float a = 0, b = 0;
      if (live && lane < ns) {
        a = kMixed ? sub_dot_as<kTwo, kOff, kHalfOff>(s[u], xs[lane]) : gemv_dot<Block>(s[u], xs[lane]);
        if (kGated) b = gemv_dot<Block>(s[R + u], xs[lane]);
      }
      float v = scale * warp_sum(a);
      if (kGated) v = glu(parts.act, v, scale * warp_sum(b));
      if (live && lane == 0) store_row(parts, pr[u], rr[u], v);
    }
  }
}

// Rows of more than 1024 values: a warp reads a row in chunks of up to 2 KiB, each lane up to
// five 16-byte pieces of it, so every load instruction reads 512 contiguous bytes (a lane
// reading its own 18-byte block in 2-byte pieces left most of each sector it fetched unused:
// 7B gate/up at 1.6 TB/s). The chunks go global -> shared by cp.async into a ring of kStages
// buffers per warp, kStages - 1 of them in flight while the warp multiplies the oldest: the
// bytes in flight cost no registers (two chunks held in registers kept ~32 KiB an SM in flight
// and the K-quants at two blocks an SM). A chunk is whole blocks; where it does not start on
// 16 bytes (Q6_K's 210-byte blocks, Q4_0's 18) its pieces start at the 16-byte boundary below
// it, and its blocks lie in the buffer at the same offset from 16 bytes as in memory; its last
// piece reads nothing past the chunk (zero-filled). The next chunk may be across a row end
// (gated rows: gemv_staged_pairs). BlockB: the block type of parts first_b.. (a layer's V
// stored in another type than its Q and K, as the _M mixes do), BlockA's otherwise; each
// part's rows are whole blocks of its type, so a chunk is of one type.
constexpr int kChunkBytes = 2048;               // the most bytes of blocks in a chunk
constexpr int kSlotBytes = kChunkBytes + 16;    // one buffer of a warp's ring: a chunk and its lead
constexpr int kStages = 4;                      // buffers in a warp's ring

// Blocks a chunk holds: as many as fit, but for eight-sub-block types taken in two parity
// passes (Q6_K: 210 bytes) a multiple of eight, so each pass is whole warp rounds (a 7B's
// 14-block lm_head rows as 8 + 6: four rounds, not 9 + 5's five; H100, two alternating
// rounds: 7B Q4_K_M tg128 410.0 -> 421.2 t/s, Q4_0 457.9 -> 462.6, 0.5B Q4_0 unchanged).
template <class Block>
constexpr int chunk_blocks() {
  constexpr int most = kChunkBytes / int(sizeof(Block));
  if constexpr (kWordsMod4<Block> >= 0 && QBlock<Block>::kSubs == 8) return most >= 8 ? most / 8 * 8 : most;
  return most;
}

template <class Block>
struct ChunkShape {
  static constexpr int kBlocks = chunk_blocks<Block>();
  static constexpr int kBytes = kBlocks * int(sizeof(Block));
  // 16-byte loads per lane: a chunk starting up to 15 bytes past a boundary spans up to
  // (kBytes + 30) / 16 pieces (Q5_0's 2,046 bytes at 14 past: 129, one more than 2,048 / 16).
  static constexpr int kPieces = (run_slot_bytes(kBytes) / 16 + 31) / 32;
  static_assert(run_slot_bytes(kBytes) <= kSlotBytes, "a ring buffer holds a chunk at any lead");
};

// The warps' rings follow x's blocks in the dynamic shared memory (q8_blocks_bytes16).
__host__ __device__ constexpr size_t staged_smem_bytes(int64_t ns, int warps = kWarps, int stages = kStages) {
  return q8_blocks_bytes16(ns) + size_t(warps) * stages * kSlotBytes;
}

// Rows longer than kWideFrom values take blocks of kWideWarps warps, one an SM: every block
// quantizes all of x (a 7B's ffn_down: 18,944 values, ten passes at 256 threads), so half as
// many blocks do that half as often, each in half the passes, with as many warps an SM as two
// blocks of eight.
constexpr int64_t kWideFrom = 8192;
constexpr int kWideWarps = 16;
// Where a staged launch's blocks (these, or three of kWarps an SM) would leave warps two rows
// each and a block of kDeepWarps gives every warp at most one, the deep form: one block of
// kDeepWarps an SM, kDeepStages buffers a ring (what fits beside x), registers capped at 72.
// A 7B's 3,584 down rows took 2,112 warps at sixteen an SM, so two thirds of the SMs ran two
// rows a warp while the others idled half the time; its O projection's 3,584 rows, 3,168 warps
// at three blocks of eight (H100, two alternating rounds, with the chunks of chunk_blocks: 7B
// Q4_0 tg128 462.6 -> 478.2 t/s, Q4_K_M 421.2 -> 430.7 for the O projection's part).
constexpr int kDeepWarps = 28;
constexpr int kDeepStages = 3;
// Past kDeepWarps rows an SM (a 7B's 4,608 QKV rows: 1,440 of 3,168 warps took two at three
// blocks of eight), up to 36: two blocks of kTwinWarps an SM (cuda option staged_twin_blocks),
// 56 registers, two buffers a ring (three do not fit twice beside x): a warp's one row of one
// chunk is all in flight at once.
constexpr int kTwinWarps = 18;
constexpr int kTwinStages = 2;

// One pass of chunk_dot over the blocks of one parity (every other block, from `parity`),
// whose words all lie as W reads them: the whole warp takes one alignment, so no lane's
// reads wait on another form.
template <class Block, int N, class W>
__device__ __forceinline__ void chunk_dot_pass(const Block *const (&blocks)[N], int nblocks, int parity, const minfer_cuda_q8_act *xc, int lane,
                                               float (&acc)[N]) {
  constexpr int kSubs = QBlock<Block>::kSubs, kMost = (ChunkShape<Block>::kBlocks + 1) / 2 * kSubs;
  const int subs = (nblocks - parity + 1) / 2 * kSubs;
#pragma unroll
  for (int u = 0; u < (kMost + 31) / 32; ++u) {
    const int t = lane + 32 * u;
    if (t < subs) {
      const int b = parity + 2 * (t / kSubs), j = t % kSubs;
      const minfer_cuda_q8_act a = load_act(&xc[b * kSubs + j]);
#pragma unroll
      for (int n = 0; n < N; ++n) {
        SubBlock sb;
        gemv_unpack_words<Block, W>(blocks[n][b], j, sb);
        acc[n] += gemv_dot<Block>(sb, a);
      }
    }
  }
}

// N chunks of blocks at the same columns times x: this lane's share of chunk n added to
// acc[n] (subs sub-blocks, x's from xc, read once for all N as load_act's 8-byte pieces: 4-byte
// ones of consecutive lanes' 40-byte blocks meet two to a bank). kAligned16: the chunks start
// on 16 bytes, for the types with QBlock::unpack16.
template <class Block, int N, bool kAligned16 = false>
__device__ __forceinline__ void chunk_dot(const Block *const (&blocks)[N], int subs, const minfer_cuda_q8_act *xc, int lane, float (&acc)[N]) {
  constexpr int kSubs = QBlock<Block>::kSubs;
  // Blocks of a size 2 mod 4 (kWordsMod4): the blocks whose words lie on 4 bytes, then the
  // others, each pass of one alignment (chunk_dot_pass), where the N chunks agree mod 4 and
  // the two passes take no more rounds of the warp than one (a 28-block row of a small model's
  // lm_head: one round of 28 lanes, not two of 14).
  if constexpr (kWordsMod4<Block> >= 0) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(blocks[0]) + kWordsMod4<Block>;
    const int nb = subs / kSubs, half = (nb + 1) / 2 * kSubs;
    bool alike = (at & 1) == 0 && (half + 31) / 32 + (subs - half + 31) / 32 <= (subs + 31) / 32;
#pragma unroll
    for (int n = 1; n < N; ++n) alike = alike && ((reinterpret_cast<uintptr_t>(blocks[n]) ^ reinterpret_cast<uintptr_t>(blocks[0])) & 3) == 0;
    if (alike) {
      const int aligned = int(at >> 1) & 1;  // the parity of the blocks whose words are on 4 bytes
      chunk_dot_pass<Block, N, WordsAt<0>>(blocks, nb, aligned, xc, lane, acc);
      chunk_dot_pass<Block, N, WordsAt<2>>(blocks, nb, aligned ^ 1, xc, lane, acc);
      return;
    }
  }
#pragma unroll
  for (int u = 0; u < (ChunkShape<Block>::kBlocks * kSubs + 31) / 32; ++u) {
    const int j = lane + 32 * u;
    if (j < subs) {
      const minfer_cuda_q8_act a = load_act(&xc[j]);
#pragma unroll
      for (int n = 0; n < N; ++n) {
        SubBlock sb;
        if constexpr (kAligned16) QBlock<Block>::unpack16(blocks[n][j / kSubs], j % kSubs, sb);
        else GemvUnpack<Block>::unpack(blocks[n][j / kSubs], j % kSubs, sb);
        acc[n] += gemv_dot<Block>(sb, a);
      }
    }
  }
}

// Register sets x's quantizing pass rotates through (quantize_to_shared): 8 warps take a 3584-value
// x in two passes, both loads out at once with two sets; 16 warps (k > 8192) take five or more
// (five sets, all at once, measured slower than three: H100 7B Q4_K_M tg128 394 vs 398);
// 28 (kDeepWarps) take three passes of 18,944 values, two sets under their 72 registers; 18
// (kTwinWarps) one set under their 56 (one pass up to 4,608 values: a 7B's QKV).
template <int kW>
constexpr int kQuantizeBufs = kW == kWideWarps ? 3 : kW == kTwinWarps ? 1 : 2;

template <class Block, class BlockB = Block, int kW = kWarps, int kS = kStages>
__device__ __forceinline__ void gemv_staged_rows(const GemvParts &parts, const float *x, int64_t ns, minfer_cuda_q8_act *xs, uint8_t *ring) {
  constexpr bool kMixed = !std::is_same_v<Block, BlockB>;
  const int lane = threadIdx.x & 31;
  const int64_t nb = ns / QBlock<Block>::kSubs, nb_b = ns / QBlock<BlockB>::kSubs;
  // A warp's cursor walks units of `group` consecutive rows (1 but for short rows of one type,
  // whose unit is one chunk: gemv_row_group; every part but the last whole units).
  const int64_t rows = parts.end[parts.n - 1], group = parts.group, units = (rows + group - 1) / group, stride = int64_t(gridDim.x) * kW;
  struct Cursor {
    int64_t o, r, off;  // unit (row) of the launch, its part's row, the chunk's byte offset in it
    int p;
    bool b;  // a row of BlockB
    const uint8_t *row;
  };
  const auto row_bytes = [&](const Cursor &c) {  // of the unit
    if (kMixed && c.b) return nb_b * int64_t(sizeof(BlockB));
    return nb * int64_t(sizeof(Block)) * (rows - c.o * group < group ? rows - c.o * group : group);
  };
  const auto full_chunk = [&](const Cursor &c) { return kMixed && c.b ? ChunkShape<BlockB>::kBytes : ChunkShape<Block>::kBytes; };
  const auto start_row = [&](Cursor &c, int64_t o) {
    c.o = o, c.off = 0, c.b = false;
    if (o >= units) return;
    c.row = reinterpret_cast<const uint8_t *>(part_row<Block>(parts, o * group, nb, c.p, c.r));
    if (kMixed && c.p >= parts.first_b) c.b = true, c.row = reinterpret_cast<const uint8_t *>(part_row_as<BlockB>(parts, c.p, c.r, nb_b));
  };
  const auto advance = [&](Cursor &c) {
    c.off += full_chunk(c);
    if (c.off >= row_bytes(c)) start_row(c, c.o + stride);
  };
  const auto chunk_bytes = [&](const Cursor &c) { return int(row_bytes(c) - c.off < full_chunk(c) ? row_bytes(c) - c.off : full_chunk(c)); };
  const auto lead = [](const Cursor &c) { return int(reinterpret_cast<uintptr_t>(c.row + c.off) & 15); };  // bytes above the 16-byte boundary
  // The chunk at load_at into ring buffer `slot` (nothing past the last row), as one copy group:
  // every lane commits a group per chunk, empty or not, so the groups count chunks alike.
  Cursor load_at{}, use_at{};
  const auto issue = [&](int slot) {
    if (load_at.o < units) {
      constexpr int kPieces = ChunkShape<Block>::kPieces > ChunkShape<BlockB>::kPieces ? ChunkShape<Block>::kPieces : ChunkShape<BlockB>::kPieces;
      copy_run_async<kPieces>(ring + slot * kSlotBytes, load_at.row + load_at.off, chunk_bytes(load_at), lane);
      advance(load_at);
    }
    cp_async_commit();
  };
  start_row(load_at, int64_t(blockIdx.x) * kW + (threadIdx.x >> 5));
  use_at = load_at;
#pragma unroll
  for (int s = 0; s < kS - 1; ++s) issue(s);
  wait_for_inputs();  // the first chunks (weights: no kernel writes them) load during the previous kernel's tail
  const float scale = norm_scale(quantize_to_shared<kQuantizeBufs<kW>>(x, parts.norm_w, ns, xs), parts.norm_w != nullptr, ns * 32, parts.eps);
  float acc[1] = {0};
  for (int slot = 0; use_at.o < units; slot = slot == kS - 1 ? 0 : slot + 1) {
    cp_async_wait<kS - 2>();  // this lane's pieces of the chunk at use_at have landed
    __syncwarp();                  // ... and every lane's; the buffer used last round is free
    issue(slot == 0 ? kS - 1 : slot - 1);
    if (load_at.o >= units) release_dependents();  // this warp's last chunks are in flight
    const uint8_t *chunk = ring + slot * kSlotBytes + lead(use_at);
    if (group > 1) {  // the chunk is the unit's whole rows, each a sum of its own (one part, Block)
      const int64_t rb = nb * int64_t(sizeof(Block));
      const int live = int(row_bytes(use_at) / rb);
      for (int g = 0; g < live; ++g) {
        const uint8_t *at = chunk + g * rb;  // as far from 16 bytes as the row in memory
        const Block *const blocks[1] = {reinterpret_cast<const Block *>(at)};
        float part[1] = {0};
        bool aligned = false;
        if constexpr (kUnpack16<Block>) aligned = (reinterpret_cast<uintptr_t>(at) & 15) == 0;
        if (aligned) chunk_dot<Block, 1, kUnpack16<Block>>(blocks, int(ns), xs, lane, part);
        else chunk_dot<Block, 1>(blocks, int(ns), xs, lane, part);
        const float v = scale * warp_sum(part[0]);
        if (lane == 0) store_row(parts, use_at.p, use_at.r + g, v);  // a unit lies in one part
      }
      advance(use_at);
      continue;
    }
    const auto dot = [&](auto tag) {  // x from the chunk's first sub-block on
      using T = decltype(tag);
      constexpr int kSubs = QBlock<T>::kSubs;
      const int subs = chunk_bytes(use_at) / int(sizeof(T)) * kSubs;
      const minfer_cuda_q8_act *xc = xs + use_at.off / int64_t(sizeof(T)) * kSubs;
      const T *const blocks[1] = {reinterpret_cast<const T *>(chunk)};
      if constexpr (kUnpack16<T>) {
        if (lead(use_at) == 0) return chunk_dot<T, 1, true>(blocks, subs, xc, lane, acc);
      }
      chunk_dot<T, 1>(blocks, subs, xc, lane, acc);
    };
    if (kMixed && use_at.b) dot(BlockB{});
    else dot(Block{});
    const Cursor done = use_at;
    advance(use_at);
    if (use_at.o == done.o) continue;  // the row goes on
    const float v = scale * warp_sum(acc[0]);
    acc[0] = 0;
    if (lane == 0) store_row(parts, done.p, done.r, v);
  }
}

// Where gemv_staged_pairs finds its gated rows and puts their results. A dense FFN's: row o of
// the gate W and of `up`, y[o] (parts' one part).
struct DensePairRows {
  const uint8_t *w[2];
  int64_t row_bytes;
  const GemvParts *parts;
  __device__ __forceinline__ const uint8_t *at(int n, int64_t o) const { return w[n] + o * row_bytes; }
  __device__ __forceinline__ void store(int64_t o, float v) const { store_row(*parts, 0, o, v); }
};

// A decode token's chosen experts' (gemv_staged_experts_kernel): row o is row o % m of pair
// o / m's expert, whose first row's index the block put in shared memory; y[o] (pair-major),
// NaN for a pair whose id was bad. The pair is o / m by a float reciprocal, corrected once.
struct ExpertPairRows {
  const uint8_t *w[2];
  int64_t row_bytes;
  const int64_t *first_row;  // shared: pair p's expert's first row (e * m)
  int m;
  float inv_m;
  float *y;
  unsigned bad;  // a bit a pair
  __device__ __forceinline__ int pair_of(int64_t o) const {
    int p = int((float(o) + 0.5f) * inv_m);
    if (int64_t(p) * m > o) --p;
    else if (int64_t(p + 1) * m <= o) ++p;
    return p;
  }
  __device__ __forceinline__ const uint8_t *at(int n, int64_t o) const {
    const int p = pair_of(o);
    return w[n] + (first_row[p] + (o - int64_t(p) * m)) * row_bytes;
  }
  __device__ __forceinline__ void store(int64_t o, float v) const { y[o] = bad && ((bad >> pair_of(o)) & 1u) ? __int_as_float(0x7fc00000) : v; }
};

// Gated rows (the gate W and `up`, y[r] = act(W[r].x) * up[r].x; where they lie and where the
// results go: Rows): the gate's and the up row's chunks at the same columns go into the ring
// as a pair, two of its buffers, and the warp multiplies both at once, so every block of x
// read from shared memory serves two weight blocks, and both rows' sums take one reduction.
// kStages / 2 pairs: one lands while the warp multiplies the other.
template <class Block, int kW = kWarps, class Rows>
__device__ __forceinline__ void gemv_staged_pairs(const Rows &w, int64_t rows, int act, const float *norm_w, float eps, const float *x, int64_t ns,
                                                  minfer_cuda_q8_act *xs, uint8_t *ring) {
  constexpr int kPairs = kStages / 2, kSubs = QBlock<Block>::kSubs, kFull = ChunkShape<Block>::kBytes;
  static_assert(kStages % 2 == 0, "the ring holds whole pairs");
  const int lane = threadIdx.x & 31;
  const int64_t stride = int64_t(gridDim.x) * kW, row_bytes = ns / kSubs * int64_t(sizeof(Block));
  struct Cursor {
    int64_t o, off;  // the row, the pair's byte offset in it
  };
  const auto pair_bytes = [&](const Cursor &c) { return int(row_bytes - c.off < kFull ? row_bytes - c.off : kFull); };
  const auto advance = [&](Cursor &c) {
    c.off += kFull;
    if (c.off >= row_bytes) c.off = 0, c.o += stride;
  };
  const auto lead = [&](const Cursor &c, int n) { return int(reinterpret_cast<uintptr_t>(w.at(n, c.o) + c.off) & 15); };
  // The pair at load_at into buffers 2 * pair and 2 * pair + 1 (nothing past the last row) as
  // one copy group: every lane commits a group per pair, empty or not.
  Cursor load_at{int64_t(blockIdx.x) * kW + (threadIdx.x >> 5), 0}, use_at = load_at;
  const auto issue = [&](int pair) {
    if (load_at.o < rows) {
#pragma unroll
      for (int n = 0; n < 2; ++n)
        copy_run_async<ChunkShape<Block>::kPieces>(ring + (2 * pair + n) * kSlotBytes, w.at(n, load_at.o) + load_at.off, pair_bytes(load_at),
                                                   lane);
      advance(load_at);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int p = 0; p < kPairs; ++p) issue(p);
  wait_for_inputs();  // the first pairs (a dense FFN's weights: no kernel writes them) load during the previous kernel's tail
  const float scale = norm_scale(quantize_to_shared<kQuantizeBufs<kW>>(x, norm_w, ns, xs), norm_w != nullptr, ns * 32, eps);
  float acc[2] = {0, 0};  // this lane's parts of the gate's and the up row's sums
  for (int pair = 0; use_at.o < rows; pair = pair == kPairs - 1 ? 0 : pair + 1) {
    cp_async_wait<kPairs - 1>();  // this lane's pieces of the pair at use_at have landed
    __syncwarp();                 // ... and every lane's
    const Block *const chunks[2] = {reinterpret_cast<const Block *>(ring + 2 * pair * kSlotBytes + lead(use_at, 0)),
                                    reinterpret_cast<const Block *>(ring + (2 * pair + 1) * kSlotBytes + lead(use_at, 1))};
    const int subs = pair_bytes(use_at) / int(sizeof(Block)) * kSubs;
    const minfer_cuda_q8_act *xc = xs + use_at.off / int64_t(sizeof(Block)) * kSubs;  // x from the chunks' first sub-block on
    bool aligned = false;
    if constexpr (kUnpack16<Block>) aligned = (lead(use_at, 0) | lead(use_at, 1)) == 0;
    if (aligned) chunk_dot<Block, 2, kUnpack16<Block>>(chunks, subs, xc, lane, acc);
    else chunk_dot<Block, 2>(chunks, subs, xc, lane, acc);
    const Cursor done = use_at;
    advance(use_at);
    __syncwarp();  // every lane is done with the pair's buffers: refill them
    issue(pair);
    if (load_at.o >= rows) release_dependents();  // this warp's last pairs are in flight
    if (use_at.o == done.o) continue;             // the rows go on
    const float t = warp_sums(acc);               // lanes 0..15 the gate's total, 16..31 the up row's
    acc[0] = acc[1] = 0;
    const float v = glu(act, scale * t, scale * __shfl_sync(0xffffffffu, t, 16));
    if (lane == 0) w.store(done.o, v);
  }
}

// kGated false: y_i[r] = W_i[r].x (+ add_i[r]) for every part i (a layer's Q, K and V in one
// launch). kGated (one part): W is the gate and `up` a second weight: y[r] = act(W[r].x) *
// up[r].x, the FFN's two products and its activation in one launch. This kernel takes rows of
// at most 1024 values (gemv_short_rows), and longer ones a warp a row where the staged
// kernel's rings do not fit beside x (GPUs with 99 KiB a block); a warp's first row starts
// loading before x is quantized, so the weights' memory latency overlaps the quantizing (the
// gate's part only when gated: both would not fit in registers).
// Blocks an SM: three for Q4_0 (its short unpacking fits 80 registers: H200, two alternating
// rounds against two, tg128 0.5B 1,079 vs 1,029 t/s, 7B 370 vs 367), two for the others (the
// K-quants' unpacking spills at three: 7B Q4_K_M tg128 267 vs 318, the 30B-A3B 354 vs 367).
template <class Block>
constexpr int kGemvBlocksPerSm = std::is_same_v<Block, minfer_block_q4_0> ? 3 : 2;

template <class Block, bool kGated>
__global__ void __launch_bounds__(kWarps * 32, kGemvBlocksPerSm<Block>) gemv_quantizing_kernel(const __grid_constant__ GemvParts parts, const Block *up, const float *x,
                                                                                                         int64_t k) {
  // Each path waits for the previous kernel after its first weight loads are in flight
  // (grid.cuh, wait_for_inputs): only x, the adds and the outputs are the inputs.
  extern __shared__ minfer_cuda_q8_act xs[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t ns = k / 32, nb = k / (32 * QBlock<Block>::kSubs), rows = parts.end[parts.n - 1];
  if (ns <= 32) return gemv_short_rows<Block, kGated>(parts, up, x, ns, nb, xs);
  const auto row_of = [&](int64_t o, int &p, int64_t &r) { return part_row<Block>(parts, o, nb, p, r); };
  const int64_t o0 = int64_t(blockIdx.x) * kWarps + warp;
  int p;
  int64_t r;
  SubBlock first[kUnroll];
  if (o0 < rows) load_subs(row_of(o0, p, r), lane, ns, first);
  wait_for_inputs();
  // One register set: this long-row path runs only where the rings do not fit, and two sets
  // beside the first rows' sub-blocks doubled Q4_0's spills (ptxas: 248 -> 472 bytes).
  const float scale = norm_scale(quantize_to_shared<1>(x, parts.norm_w, ns, xs), parts.norm_w != nullptr, k, parts.eps);
  for (int64_t o = o0; o < rows; o += int64_t(gridDim.x) * kWarps) {
    const Block *row = row_of(o, p, r);
    if (o != o0) load_subs(row, lane, ns, first);
    float v = scale * row_dot(row, xs, ns, lane, first);
    if (kGated) {
      load_subs(up + r * nb, lane, ns, first);
      v = glu(parts.act, v, scale * row_dot(up + r * nb, xs, ns, lane, first));
    }
    if (lane == 0) store_row(parts, p, r, v);
  }
}

// Staged rows (gemv_staged_rows) in a kernel of their own: without the other paths' unpacked
// sub-blocks it needs few enough registers for kStagedBlocksPerSm blocks an SM, as many as
// the rings of a 3584-value row fit in shared memory.
constexpr int kStagedBlocksPerSm = 3;

template <class Block, bool kGated, class BlockB = Block, int kW = kWarps, int kS = kStages>
__global__ void __launch_bounds__(kW * 32, kW == kWarps ? kStagedBlocksPerSm : kW == kTwinWarps ? 2 : 1) gemv_staged_kernel(const __grid_constant__ GemvParts parts,
                                                                                                     const Block *up, const float *x, int64_t k) {
  static_assert(!kGated || kS == kStages, "gated rows take the ring as pairs of kStages / 2");
  extern __shared__ __align__(16) minfer_cuda_q8_act xs[];  // the rings take 16-byte copies and loads
  const int64_t ns = k / 32;
  uint8_t *const ring = reinterpret_cast<uint8_t *>(xs) + q8_blocks_bytes16(ns) + (threadIdx.x >> 5) * kS * kSlotBytes;
  if constexpr (kGated) {
    const DensePairRows rows{{static_cast<const uint8_t *>(parts.w[0]), reinterpret_cast<const uint8_t *>(up)}, ns / QBlock<Block>::kSubs * int64_t(sizeof(Block)), &parts};
    gemv_staged_pairs<Block, kW>(rows, parts.end[0], parts.act, parts.norm_w, parts.eps, x, ns, xs, ring);
  }
  else gemv_staged_rows<Block, BlockB, kW, kS>(parts, x, ns, xs, ring);
}

// A decode token's gate/up experts through the rings (cuda option staged_expert_pairs): the
// chosen experts' gate and up rows as one launch's gated rows, pair p's after pair p-1's (y
// pair-major, as mmvq_id_decode_kernel writes it), all against the token's one x. Their
// addresses come from the ids the router (the kernel before) writes, so the block reads them
// after its wait: unlike a dense FFN's, no weight loads overlap the previous kernel's tail.
constexpr int kStagedExpertsMax = 32;  // choices: a bit each in ExpertPairRows::bad

template <class Block>
__global__ void __launch_bounds__(kWarps * 32, kStagedBlocksPerSm)
    gemv_staged_experts_kernel(const Block *w, const Block *up, int act, const float *x, float *y, int64_t k, int m, float inv_m, int choices,
                               const int32_t *ids, int32_t n_expert, int32_t *error_flag, int32_t error_tag) {
  extern __shared__ __align__(16) minfer_cuda_q8_act xs[];
  __shared__ int64_t first_row[kStagedExpertsMax];
  __shared__ unsigned bad;
  wait_for_inputs();
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  if (int(threadIdx.x) < choices) {
    const int32_t e = ids[threadIdx.x];
    const bool ok = e >= 0 && e < n_expert;
    first_row[threadIdx.x] = int64_t(ok ? e : 0) * m;  // a bad id reads expert 0's rows, writes NaN
    if (!ok) {
      atomicOr(&bad, 1u << threadIdx.x);
      if (blockIdx.x == 0 && atomicCAS(error_flag, 0, error_tag) == 0) error_flag[1] = e;
    }
  }
  __syncthreads();
  const int64_t ns = k / 32;
  uint8_t *const ring = reinterpret_cast<uint8_t *>(xs) + q8_blocks_bytes16(ns) + (threadIdx.x >> 5) * kStages * kSlotBytes;
  const ExpertPairRows rows{{reinterpret_cast<const uint8_t *>(w), reinterpret_cast<const uint8_t *>(up)},
                            ns / QBlock<Block>::kSubs * int64_t(sizeof(Block)), first_row, m, inv_m, y, bad};
  gemv_staged_pairs<Block>(rows, int64_t(choices) * m, act, nullptr, 0.0f, x, ns, xs, ring);
}

// Parts of two block types in one launch (gemv_short_rows with BlockB); short rows only.
template <class BlockA, class BlockB>
__global__ void __launch_bounds__(kWarps * 32, 2) gemv_mixed_kernel(const __grid_constant__ GemvParts parts, const float *x, int64_t k) {
  extern __shared__ minfer_cuda_q8_act xs[];
  gemv_short_rows<BlockA, false, BlockB>(parts, nullptr, x, k / 32, k / (32 * QBlock<BlockA>::kSubs), xs);
}

// The mixes llama.cpp's _M types make of a layer's Q, K (first) and V: Q4_K/Q5_K with Q6_K, and
// their fallbacks Q5_0/Q5_1 with Q8_0 where rows do not fill 256-value blocks.
template <class F>
bool visit_mixed_pair(int32_t a, int32_t b, F &&f) {
  if (a == MINFER_DTYPE_Q5_0 && b == MINFER_DTYPE_Q8_0) return f(minfer_block_q5_0{}, minfer_block_q8_0{}), true;
  if (a == MINFER_DTYPE_Q5_1 && b == MINFER_DTYPE_Q8_0) return f(minfer_block_q5_1{}, minfer_block_q8_0{}), true;
  if (a == MINFER_DTYPE_Q4_K && b == MINFER_DTYPE_Q6_K) return f(minfer_block_q4_k{}, minfer_block_q6_k{}), true;
  if (a == MINFER_DTYPE_Q5_K && b == MINFER_DTYPE_Q6_K) return f(minfer_block_q5_k{}, minfer_block_q6_k{}), true;
  return false;
}

// The launch's parts as the kernels take them.
GemvParts gemv_parts(const minfer_cuda_launch_cfg *cfg, const minfer_cuda_gemv_part *parts, int32_t n_parts, const float *norm_w, float eps, int64_t &m) {
  GemvParts gp{};
  m = 0;
  for (int i = 0; i < n_parts; ++i) {
    gp.w[i] = parts[i].w, gp.y[i] = parts[i].y, gp.add[i] = parts[i].add;
    gp.end[i] = m += parts[i].m;
  }
  gp.n = gp.first_b = n_parts;
  gp.norm_w = norm_w, gp.eps = eps;
  gp.group = 1;
  return gp;
}

// One wave of the kernel's resident blocks (measured against eight an SM, and against no early
// first-row loads at 71 registers: tg128 0.5B Q4_0 757 vs 732 vs 699 t/s, 7B 237 vs 219 vs 212).
int64_t gemv_blocks(minfer_cuda_launch_cfg *cfg, int64_t m, int64_t rows_per_warp, int32_t sm_count, int per_sm = 2, int warps = kWarps) {
  const int64_t want = (m + warps * rows_per_warp - 1) / (warps * rows_per_warp), most = int64_t(sm_count > 0 ? sm_count : 132) * per_sm;
  const int64_t blocks = want < most ? want : most;
  return blocks < cfg->max_blocks ? blocks : cfg->max_blocks;
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" int minfer_cuda_gemv_quantizing_supported(int32_t dtype, int64_t k) {
  return visit_int8_block(dtype, [](auto) {}) && k % minfer_dtype_info(dtype).block_values == 0 &&
         size_t(k / 32) * sizeof(minfer_cuda_q8_act) <= 48 * 1024;
}

// Short rows (k <= 1024) stream through the rings too where a launch has this many rows (a
// small model's lm_head: 151,936 rows of 896 values): a lane reading its own block of a short
// row in 2- or 4-byte pieces leaves most of each sector it fetches unused. The cuda option
// staged_short_rows_from sets it (the launch's cfg, 0: this).
constexpr int64_t kStagedShortRowsFrom = 32768;
static int64_t short_rows_from(const minfer_cuda_launch_cfg *cfg) { return cfg && cfg->short_rows_from > 0 ? cfg->short_rows_from : kStagedShortRowsFrom; }

// Consecutive rows of k values a staged chunk holds where a launch has very many short ones
// (a small model's lm_head: 151,936 rows of 896 values, Q8_0's 952 bytes): one row a chunk
// used half of each ring buffer, so half the bytes a ring could keep in flight; 1 where two
// rows do not fit a chunk.
template <class Block>
int64_t gemv_row_group(int64_t k) {
  const int64_t row = k / (32 * QBlock<Block>::kSubs) * int64_t(sizeof(Block));
  return 2 * row <= ChunkShape<Block>::kBytes ? ChunkShape<Block>::kBytes / row : 1;
}

// Blocks of kWarps an SM for a staged launch of `smem` bytes a block: kStagedBlocksPerSm, or
// as many as the SM's shared memory holds (the runtime keeps 1 KiB a block).
static int staged_blocks_per_sm(size_t smem) {
  int device = 0, per_sm_smem = 228 * 1024;
  if (cudaGetDevice(&device) == cudaSuccess) cudaDeviceGetAttribute(&per_sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  return int(std::max<size_t>(1, std::min<size_t>(kStagedBlocksPerSm, size_t(per_sm_smem) / (smem + 1024))));
}

extern "C" int minfer_cuda_experts_staged_supported(int32_t dtype, int64_t k, int64_t m, int64_t choices) {
  int device = 0, optin = 48 * 1024;
  if (cudaGetDevice(&device) == cudaSuccess) cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  return visit_int8_block(dtype, [](auto) {}) && k % minfer_dtype_info(dtype).block_values == 0 && choices >= 1 && choices <= kStagedExpertsMax &&
         m >= 1 && m * choices <= (int64_t(1) << 24) && staged_smem_bytes(k / 32) <= size_t(optin);
}

extern "C" cudaError_t minfer_cuda_experts_staged(minfer_cuda_launch_cfg *cfg, int32_t dtype, const void *w, const void *up, int32_t act,
                                                  const float *x, float *y, int64_t k, int64_t m, int64_t n_expert, int64_t choices,
                                                  const int32_t *ids, int32_t *error_flag, int32_t error_tag, int32_t sm_count) {
  if (!up || !ids || !minfer_cuda_experts_staged_supported(dtype, k, m, choices)) return cudaErrorInvalidValue;
  const size_t smem = staged_smem_bytes(k / 32);
  const int per_sm = staged_blocks_per_sm(smem);
  const int64_t blocks = gemv_blocks(cfg, choices * m, 1, sm_count, per_sm);
  cudaError_t e = cudaSuccess;
  visit_int8_block(dtype, [&](auto tag) {
    using Block = decltype(tag);
    const auto kernel = gemv_staged_experts_kernel<Block>;
    if (smem > 48 * 1024) e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e == cudaSuccess)
      launch_kernel(cfg, kernel, unsigned(blocks), kWarps * 32, smem, static_cast<const Block *>(w), static_cast<const Block *>(up), int(act), x, y,
                    k, int(m), 1.0f / float(m), int(choices), ids, int32_t(n_expert), error_flag, error_tag);
  });
  if (e != cudaSuccess) return e;
  return launched(cfg, "gemv_staged_experts_kernel (gate, up, glu)", dtype);
}

extern "C" int minfer_cuda_gemv_staged(const minfer_cuda_launch_cfg *cfg, int64_t k, int64_t m) {
  int device = 0, optin = 48 * 1024;
  if (cudaGetDevice(&device) == cudaSuccess) cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  return (k / 32 > 32 || m >= short_rows_from(cfg)) && staged_smem_bytes(k / 32) <= size_t(optin);
}

extern "C" cudaError_t minfer_cuda_gemv_quantizing(minfer_cuda_launch_cfg *cfg, int32_t dtype, const minfer_cuda_gemv_part *parts, int32_t n_parts,
                                                   const void *up, int32_t act, const float *x, int64_t k, const float *norm_w,
                                                   float eps, int32_t sm_count) {
  if (n_parts < 1 || n_parts > kMinferCudaGemvMaxParts || (up && n_parts != 1)) return cudaErrorInvalidValue;
  int64_t m;
  GemvParts gp = gemv_parts(cfg, parts, n_parts, norm_w, eps, m);
  gp.act = act;
  int device = 0, per_sm_smem = 228 * 1024, optin = 48 * 1024;
  if (cudaGetDevice(&device) == cudaSuccess) {
    cudaDeviceGetAttribute(&per_sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  }
  cudaError_t e = cudaSuccess;
  bool staged = false;
  const bool known = visit_int8_block(dtype, [&](auto tag) {
    using Block = decltype(tag);
    // Long rows stream through the warps' rings where those fit beside x (gemv_staged_rows: a
    // chunk's first piece may start up to 15 bytes before it, still inside the weights'
    // allocation, whose start the driver aligns far more).
    staged = minfer_cuda_gemv_staged(cfg, k, m);
    const int64_t per_warp = !staged && k / 32 <= 32 ? (up ? kShortRows / 2 : kShortRows) : 1;  // rows a warp takes at once
    const bool wide = staged && k > kWideFrom && staged_smem_bytes(k / 32, kWideWarps) <= size_t(optin);
    int warps = wide ? kWideWarps : kWarps;
    size_t smem = staged ? staged_smem_bytes(k / 32, warps) : size_t(k / 32) * sizeof(minfer_cuda_q8_act);
    // As many blocks an SM as the registers allow and the shared memory holds (the runtime keeps 1 KiB a block).
    const int most_per_sm = wide ? 1 : staged ? kStagedBlocksPerSm : kGemvBlocksPerSm<Block>;
    int per_sm = int(std::max<size_t>(1, std::min<size_t>(most_per_sm, size_t(per_sm_smem) / (smem + 1024))));
    if (staged && !up && cfg->row_groups && k / 32 <= 32) {  // short rows: as many a chunk as fit, no unit across two parts
      gp.group = gemv_row_group<Block>(k);
      for (int i = 0; i + 1 < n_parts; ++i)
        if (parts[i].m % gp.group != 0) gp.group = 1;
    }
    const int64_t units = (m + gp.group - 1) / gp.group;  // a warp's work items: rows, or groups of short rows
    // Staged rows that would leave some warps two and a 28-warp block an SM gives each at most one.
    const int64_t sms = sm_count > 0 ? sm_count : 132;
    const bool deep = staged && !up && units > int64_t(warps) * per_sm * sms && units <= kDeepWarps * sms &&
                      staged_smem_bytes(k / 32, kDeepWarps, kDeepStages) <= size_t(optin);
    if (deep) warps = kDeepWarps, per_sm = 1, smem = staged_smem_bytes(k / 32, kDeepWarps, kDeepStages);
    const size_t twin_smem = staged_smem_bytes(k / 32, kTwinWarps, kTwinStages);
    const bool twin = staged && !up && !deep && cfg->twin_blocks && units > int64_t(warps) * per_sm * sms && units <= 2 * kTwinWarps * sms &&
                      twin_smem <= size_t(optin) && 2 * (twin_smem + 1024) <= size_t(per_sm_smem);
    if (twin) warps = kTwinWarps, per_sm = 2, smem = twin_smem;
    const int64_t blocks = gemv_blocks(cfg, units, per_warp, sm_count, per_sm, warps);
    const auto run = [&](auto kernel, const Block *up_w) {
      if (smem > 48 * 1024) e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      if (e == cudaSuccess) launch_kernel(cfg, kernel, unsigned(blocks), warps * 32, smem, gp, up_w, x, k);
    };
    const Block *up_w = static_cast<const Block *>(up);
    if (deep) run(gemv_staged_kernel<Block, false, Block, kDeepWarps, kDeepStages>, nullptr);
    else if (twin) run(gemv_staged_kernel<Block, false, Block, kTwinWarps, kTwinStages>, nullptr);
    else if (wide) up ? run(gemv_staged_kernel<Block, true, Block, kWideWarps>, up_w) : run(gemv_staged_kernel<Block, false, Block, kWideWarps>, nullptr);
    else if (staged) up ? run(gemv_staged_kernel<Block, true>, up_w) : run(gemv_staged_kernel<Block, false>, nullptr);
    else up ? run(gemv_quantizing_kernel<Block, true>, up_w) : run(gemv_quantizing_kernel<Block, false>, nullptr);
  });
  if (e != cudaSuccess) return e;
  if (!known) return cudaErrorNotSupported;
  static const char *const names[2][4] = {
      {"gemv_quantizing_kernel", "gemv_quantizing_kernel (grouped)", "gemv_quantizing_kernel (gate, up, silu)", "gemv_quantizing_kernel (gate, up, gelu)"},
      {"gemv_staged_kernel", "gemv_staged_kernel (grouped)", "gemv_staged_kernel (gate, up, silu)", "gemv_staged_kernel (gate, up, gelu)"}};
  return launched(cfg, names[staged][up ? (act == MINFER_CUDA_GLU_GELU ? 3 : 2) : n_parts > 1 ? 1 : 0], dtype);
}


// Long rows of two types take the staged kernel, whose rings must fit the shared memory every
// GPU since Ampere lets a block have (99 KiB on sm_86): k up to ~19,000.
constexpr size_t kMixedStagedSmem = 99 * 1024;

extern "C" int minfer_cuda_gemv_mixable(int32_t dtype_a, int32_t dtype_b, int64_t k) {
  return visit_mixed_pair(dtype_a, dtype_b, [](auto, auto) {}) && k % minfer_dtype_info(dtype_a).block_values == 0 &&
         (k / 32 <= 32 || staged_smem_bytes(k / 32) <= kMixedStagedSmem);
}

extern "C" cudaError_t minfer_cuda_gemv_quantizing_mixed(minfer_cuda_launch_cfg *cfg, int32_t dtype_a, int32_t dtype_b,
                                                         const minfer_cuda_gemv_part *parts, int32_t n_parts, int32_t first_b, const float *x,
                                                         int64_t k, const float *norm_w, float eps, int32_t sm_count) {
  if (n_parts < 2 || n_parts > kMinferCudaGemvMaxParts || first_b < 1 || first_b >= n_parts || !minfer_cuda_gemv_mixable(dtype_a, dtype_b, k))
    return cudaErrorInvalidValue;
  int64_t m;
  GemvParts gp = gemv_parts(cfg, parts, n_parts, norm_w, eps, m);
  gp.first_b = first_b;
  if (k / 32 <= 32) {
    const int64_t blocks = gemv_blocks(cfg, m, kShortRows, sm_count);
    const size_t smem = size_t(k / 32) * sizeof(minfer_cuda_q8_act);
    visit_mixed_pair(dtype_a, dtype_b, [&](auto a, auto b) {
      launch_kernel(cfg, gemv_mixed_kernel<decltype(a), decltype(b)>, unsigned(blocks), kWarps * 32, smem, gp, x, k);
    });
    return launched(cfg, "gemv_mixed_kernel (grouped, two block types)", dtype_a);
  }
  // Staged rows (gemv_staged_rows with the second type).
  const size_t smem = staged_smem_bytes(k / 32);
  const int per_sm = staged_blocks_per_sm(smem);
  const int64_t blocks = gemv_blocks(cfg, m, 1, sm_count, per_sm);
  cudaError_t e = cudaSuccess;
  visit_mixed_pair(dtype_a, dtype_b, [&](auto a, auto b) {
    const auto kernel = gemv_staged_kernel<decltype(a), false, decltype(b)>;
    if (smem > 48 * 1024) e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e == cudaSuccess) launch_kernel(cfg, kernel, unsigned(blocks), kWarps * 32, smem, gp, nullptr, x, k);
  });
  if (e != cudaSuccess) return e;
  return launched(cfg, "gemv_staged_kernel (grouped, two block types)", dtype_a);
}
