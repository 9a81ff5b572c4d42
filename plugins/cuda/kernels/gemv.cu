// plugins/cuda/kernels/gemv.cu — the one-token matmul (decode): y = W x for the block types of
// qblock.cuh, x in f32 quantized by the kernel itself into shared memory (no launch before
// it), dp4a dot products (int8_dot.cuh). One launch can take up to three weights sharing x
// (a layer's Q, K, V with their biases), or a gate and up weight with their activation (SwiGLU, GeGLU), and an
// RMS norm of x folded in.
#include <type_traits>

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
    if (s0 + 32 * u < ns) unpack_sub(row, s0 + 32 * u, s[u]);
}

// W[o] . xs for one row, kUnroll sub-blocks per lane in flight; `first` holds the lane's
// first kUnroll sub-blocks, loaded by the caller before x was ready.
template <class Block>
__device__ __forceinline__ float row_dot(const Block *row, const minfer_cuda_q8_act *xs, int64_t ns, int lane,
                                         const SubBlock (&first)[kUnroll]) {
  float acc = 0;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
    if (lane + 32 * u < ns) acc += sub_dot<Block>(first[u], xs[lane + 32 * u]);
  for (int64_t s0 = lane + 32 * kUnroll; s0 < ns; s0 += 32 * kUnroll) {
    SubBlock s[kUnroll];
    load_subs(row, s0, ns, s);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (s0 + 32 * u < ns) acc += sub_dot<Block>(s[u], xs[s0 + 32 * u]);
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
  bool staged;  // rows read in 16-byte pieces through shared memory (gemv_staged_rows)
  int act;      // with an up weight: the gate's activation (MINFER_CUDA_GLU_*)
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
        else unpack_sub(row, lane, s[u]);
        if (kGated) unpack_sub(up + rr[u] * nb, lane, s[R + u]);
      }
    }
  };
  if (t0 * R < rows) load(t0);
  const float scale = norm_scale(quantize_to_shared(x, parts.norm_w, ns, xs), parts.norm_w != nullptr, ns * 32, parts.eps);
  for (int64_t t = t0; t * R < rows; t += stride) {
    if (t != t0) load(t);
#pragma unroll
    for (int u = 0; u < R; ++u) {
      const bool live = t * R + u < rows;
      float a = 0, b = 0;
      if (live && lane < ns) {
        a = sub_dot_as<kTwo, kOff>(s[u], xs[lane]);
        if (kGated) b = sub_dot<Block>(s[R + u], xs[lane]);
      }
      float v = scale * warp_sum(a);
      if (kGated) v = glu(parts.act, v, scale * warp_sum(b));
      if (live && lane == 0) store_row(parts, pr[u], rr[u], v);
    }
  }
}

// Rows whose bytes are whole 16-byte pieces (every row 16-byte aligned): a warp reads a row in
// chunks of up to 2 KiB, each lane four 16-byte pieces of it, so every load instruction reads
// 512 contiguous bytes (a lane reading its own 18-byte block in 2-byte pieces left most of
// each sector it fetched unused: 7B gate/up at 1.6 TB/s). The chunk goes through the warp's
// shared memory to the lanes that own its sub-blocks. Chunks are whole groups of blocks, so
// none straddles two; the next chunk (across row ends, and from the gate's row to the up row)
// is loaded before this one is multiplied.
constexpr int kChunkBytes = 2048;  // a warp's shared buffer

template <class Block>
struct ChunkShape {
  static constexpr int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }
  static constexpr int kGroupBlocks = 16 / gcd(int(sizeof(Block)), 16);  // blocks per 16-byte-aligned group
  static constexpr int kBlocks = kChunkBytes / (kGroupBlocks * int(sizeof(Block))) * kGroupBlocks;
  static constexpr int kBytes = kBlocks * int(sizeof(Block));
  static constexpr int kPieces = (kBytes / 16 + 31) / 32;  // 16-byte loads per lane
};

// The warps' chunk buffers follow x's blocks in the dynamic shared memory.
__host__ __device__ constexpr size_t staged_buffers_offset(int64_t ns) { return (size_t(ns) * sizeof(minfer_cuda_q8_act) + 15) / 16 * 16; }

template <class Block, bool kGated>
__device__ __forceinline__ void gemv_staged_rows(const GemvParts &parts, const Block *up, const float *x, int64_t ns, int64_t nb,
                                                 minfer_cuda_q8_act *xs, uint8_t *wbuf) {
  using C = ChunkShape<Block>;
  constexpr int kSubs = QBlock<Block>::kSubs;
  const int lane = threadIdx.x & 31;
  const int64_t rows = parts.end[parts.n - 1], stride = int64_t(gridDim.x) * kWarps, row_bytes = nb * int64_t(sizeof(Block));
  struct Cursor {
    int64_t o, r, off;  // row of the launch, its part's row, the chunk's byte offset in it
    int p;
    bool second;  // the up weight's row (gated)
    const uint8_t *row;
  };
  const auto start_row = [&](Cursor &c, int64_t o) {
    c.o = o, c.off = 0, c.second = false;
    if (o < rows) c.row = reinterpret_cast<const uint8_t *>(part_row<Block>(parts, o, nb, c.p, c.r));
  };
  const auto advance = [&](Cursor &c) {
    c.off += C::kBytes;
    if (c.off < row_bytes) return;
    if (kGated && !c.second) {
      c.off = 0, c.second = true, c.row = reinterpret_cast<const uint8_t *>(up + c.r * nb);
      return;
    }
    start_row(c, c.o + stride);
  };
  const auto pieces = [&](const Cursor &c) { return int((row_bytes - c.off < C::kBytes ? row_bytes - c.off : C::kBytes) / 16); };
  const auto load = [&](const Cursor &c, uint4 (&v)[C::kPieces]) {
    const uint4 *src = reinterpret_cast<const uint4 *>(c.row + c.off);
    const int n = pieces(c);
#pragma unroll
    for (int u = 0; u < C::kPieces; ++u)
      if (lane + 32 * u < n) v[u] = src[lane + 32 * u];
  };
  Cursor load_at, use_at;
  start_row(load_at, int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5));
  use_at = load_at;
  uint4 va[C::kPieces], vb[C::kPieces];
  if (load_at.o < rows) {
    load(load_at, va);
    advance(load_at);
  }
  wait_for_inputs();  // the first chunk (weights: no kernel writes them) loads during the previous kernel's tail
  const float scale = norm_scale(quantize_to_shared(x, parts.norm_w, ns, xs), parts.norm_w != nullptr, ns * 32, parts.eps);
  float acc = 0, gate = 0;
  const Block *blocks = reinterpret_cast<const Block *>(wbuf);
  // Multiply the chunk in `cur` while the next one loads into `nxt`; finish a row at its end.
  const auto step = [&](uint4(&cur)[C::kPieces], uint4(&nxt)[C::kPieces]) {
    if (load_at.o < rows) {
      load(load_at, nxt);
      advance(load_at);
    }
    const int n = pieces(use_at);
    __syncwarp();  // the previous chunk is read
#pragma unroll
    for (int u = 0; u < C::kPieces; ++u)
      if (lane + 32 * u < n) reinterpret_cast<uint4 *>(wbuf)[lane + 32 * u] = cur[u];
    __syncwarp();
    const int subs = n * 16 / int(sizeof(Block)) * kSubs;
    const minfer_cuda_q8_act *xc = xs + use_at.off / int64_t(sizeof(Block)) * kSubs;  // x of the chunk's first sub-block
#pragma unroll
    for (int u = 0; u < (C::kBlocks * kSubs + 31) / 32; ++u) {
      const int j = lane + 32 * u;
      if (j < subs) {
        SubBlock sb;
        QBlock<Block>::unpack(blocks[j / kSubs], j % kSubs, sb);
        acc += sub_dot<Block>(sb, xc[j]);
      }
    }
    const Cursor done = use_at;
    advance(use_at);
    if (use_at.o == done.o && use_at.second == done.second) return;  // the row goes on
    const float v = scale * warp_sum(acc);
    acc = 0;
    if (kGated && !done.second) {
      gate = v;
      return;
    }
    if (lane == 0) store_row(parts, done.p, done.r, kGated ? glu(parts.act, gate, v) : v);
  };
  while (use_at.o < rows) {
    step(va, vb);
    if (use_at.o >= rows) break;
    step(vb, va);
  }
}

// kGated false: y_i[r] = W_i[r].x (+ add_i[r]) for every part i (a layer's Q, K and V in one
// launch). kGated (one part): W is the gate and `up` a second weight: y[r] = act(W[r].x) *
// up[r].x, the FFN's two products and its activation in one launch. A warp's first row starts
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
  if (ns <= 32) {
    wait_for_inputs();
    return gemv_short_rows<Block, kGated>(parts, up, x, ns, nb, xs);
  }
  if (parts.staged)
    return gemv_staged_rows<Block, kGated>(parts, up, x, ns, nb, xs,
                                           reinterpret_cast<uint8_t *>(xs) + staged_buffers_offset(ns) + warp * kChunkBytes);
  const auto row_of = [&](int64_t o, int &p, int64_t &r) { return part_row<Block>(parts, o, nb, p, r); };
  const int64_t o0 = int64_t(blockIdx.x) * kWarps + warp;
  int p;
  int64_t r;
  SubBlock first[kUnroll];
  if (o0 < rows) load_subs(row_of(o0, p, r), lane, ns, first);
  wait_for_inputs();
  const float scale = norm_scale(quantize_to_shared(x, parts.norm_w, ns, xs), parts.norm_w != nullptr, k, parts.eps);
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

// Parts of two block types in one launch (gemv_short_rows with BlockB); short rows only.
template <class BlockA, class BlockB>
__global__ void __launch_bounds__(kWarps * 32, 2) gemv_mixed_kernel(const __grid_constant__ GemvParts parts, const float *x, int64_t k) {
  wait_for_inputs();
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
GemvParts gemv_parts(const minfer_cuda_gemv_part *parts, int32_t n_parts, const float *norm_w, float eps, int64_t &m) {
  GemvParts gp{};
  m = 0;
  for (int i = 0; i < n_parts; ++i) {
    gp.w[i] = parts[i].w, gp.y[i] = parts[i].y, gp.add[i] = parts[i].add;
    gp.end[i] = m += parts[i].m;
  }
  gp.n = gp.first_b = n_parts;
  gp.norm_w = norm_w, gp.eps = eps;
  return gp;
}

// One wave of the kernel's resident blocks (measured against eight an SM, and against no early
// first-row loads at 71 registers: tg128 0.5B Q4_0 757 vs 732 vs 699 t/s, 7B 237 vs 219 vs 212).
int64_t gemv_blocks(minfer_cuda_launch_cfg *cfg, int64_t m, int64_t rows_per_warp, int32_t sm_count, int per_sm = 2) {
  const int64_t want = (m + kWarps * rows_per_warp - 1) / (kWarps * rows_per_warp), most = int64_t(sm_count > 0 ? sm_count : 132) * per_sm;
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

extern "C" cudaError_t minfer_cuda_gemv_quantizing(minfer_cuda_launch_cfg *cfg, int32_t dtype, const minfer_cuda_gemv_part *parts, int32_t n_parts,
                                                   const void *up, int32_t act, const float *x, int64_t k, const float *norm_w,
                                                   float eps, int32_t sm_count) {
  if (n_parts < 1 || n_parts > kMinferCudaGemvMaxParts || (up && n_parts != 1)) return cudaErrorInvalidValue;
  int64_t m;
  GemvParts gp = gemv_parts(parts, n_parts, norm_w, eps, m);
  gp.act = act;
  const int64_t per_warp = k / 32 <= 32 ? (up ? kShortRows / 2 : kShortRows) : 1;  // rows a warp takes at once
  size_t smem = size_t(k / 32) * sizeof(minfer_cuda_q8_act);
  const bool known = visit_int8_block(dtype, [&](auto tag) {
    using Block = decltype(tag);
    const int64_t blocks = gemv_blocks(cfg, m, per_warp, sm_count, kGemvBlocksPerSm<Block>);
    // Staged rows need every row 16-byte aligned, and their buffers must fit beside x.
    const size_t staged_smem = staged_buffers_offset(k / 32) + size_t(kWarps) * kChunkBytes;
    bool aligned = k / 32 > 32 && (k / (32 * QBlock<Block>::kSubs) * sizeof(Block)) % 16 == 0 && staged_smem <= 48 * 1024 &&
                   reinterpret_cast<uintptr_t>(up) % 16 == 0;
    for (int i = 0; i < n_parts; ++i) aligned = aligned && reinterpret_cast<uintptr_t>(parts[i].w) % 16 == 0;
    gp.staged = aligned;
    if (aligned) smem = staged_smem;
    if (up)
      launch_kernel(cfg, gemv_quantizing_kernel<Block, true>, unsigned(blocks), kWarps * 32, smem, gp, static_cast<const Block *>(up), x, k);
    else
      launch_kernel(cfg, gemv_quantizing_kernel<Block, false>, unsigned(blocks), kWarps * 32, smem, gp, nullptr, x, k);
  });
  if (!known) return cudaErrorNotSupported;
  return launched(cfg, up ? (act == MINFER_CUDA_GLU_GELU ? "gemv_quantizing_kernel (gate, up, gelu)" : "gemv_quantizing_kernel (gate, up, silu)") : n_parts > 1 ? "gemv_quantizing_kernel (grouped)" : "gemv_quantizing_kernel",
                  dtype);
}


extern "C" int minfer_cuda_gemv_mixable(int32_t dtype_a, int32_t dtype_b, int64_t k) {
  return visit_mixed_pair(dtype_a, dtype_b, [](auto, auto) {}) && k % minfer_dtype_info(dtype_a).block_values == 0 && k / 32 <= 32;
}

extern "C" cudaError_t minfer_cuda_gemv_quantizing_mixed(minfer_cuda_launch_cfg *cfg, int32_t dtype_a, int32_t dtype_b,
                                                         const minfer_cuda_gemv_part *parts, int32_t n_parts, int32_t first_b, const float *x,
                                                         int64_t k, const float *norm_w, float eps, int32_t sm_count) {
  if (n_parts < 2 || n_parts > kMinferCudaGemvMaxParts || first_b < 1 || first_b >= n_parts || !minfer_cuda_gemv_mixable(dtype_a, dtype_b, k))
    return cudaErrorInvalidValue;
  int64_t m;
  GemvParts gp = gemv_parts(parts, n_parts, norm_w, eps, m);
  gp.first_b = first_b;
  const int64_t blocks = gemv_blocks(cfg, m, kShortRows, sm_count);
  const size_t smem = size_t(k / 32) * sizeof(minfer_cuda_q8_act);
  visit_mixed_pair(dtype_a, dtype_b, [&](auto a, auto b) {
    launch_kernel(cfg, gemv_mixed_kernel<decltype(a), decltype(b)>, unsigned(blocks), kWarps * 32, smem, gp, x, k);
  });
  return launched(cfg, "gemv_mixed_kernel (grouped, two block types)", dtype_a);
}
