// plugins/cuda/kernels/flash_attention.cu — fused causal GQA attention (flash-style, split-K).
//
// A block takes 32 query rows of one KV head — the (token, query head) pairs that share that
// head's K and V, token-major — and walks the keys in tiles of 32 staged in shared memory as
// f32, with a running max and sum per row (online softmax), so no score matrix is stored
// and any context length fits. Warp w owns rows 8w..8w+7; lane j scores key j of the tile
// for its 8 rows, and for P·V lane j owns dims j, j+32, ...
//
// Split-K: when (KV heads x row tiles) would not fill the GPU — decode above all — the keys
// are cut into `splits` chunks; each block writes its rows' unnormalized output with their
// max and sum, and a second kernel merges the chunks. The split count depends only on the
// token count and the cache length, never on n_past, so a captured graph stays valid.
#include <cuda_fp16.h>

#include "grid.cuh"
#include "minfer/dtype.h"
#include "reduce.cuh"

namespace minfer::cuda {
namespace {

constexpr int kWarps = 4, kRowsPerWarp = 8, kRows = kWarps * kRowsPerWarp, kKeys = 32;
constexpr int kThreads = kWarps * 32;
constexpr int64_t kMinChunk = 32;  // keys per split at least: one tile

template <int HD>
constexpr int k_stride() { return HD + 4; }  // K rows padded: lane j's float4 reads fall in distinct banks

template <int HD>
constexpr size_t smem_bytes() { return size_t(kRows * HD + kKeys * k_stride<HD>() + kKeys * HD) * sizeof(float); }

__device__ __forceinline__ float2 load2(const float *p) { return *reinterpret_cast<const float2 *>(p); }
__device__ __forceinline__ float2 load2(const __half *p) { return __half22float2(*reinterpret_cast<const __half2 *>(p)); }
__device__ __forceinline__ float ldf(const float *p) { return *p; }
__device__ __forceinline__ float ldf(const __half *p) { return __half2float(*p); }
// A value as the cache of type T keeps it (f16 rounds).
__device__ __forceinline__ float as_cached(float v, const float *) { return v; }
__device__ __forceinline__ float as_cached(float v, const __half *) { return __half2float(__float2half_rn(v)); }
__device__ __forceinline__ void st(float *p, float v) { *p = v; }
__device__ __forceinline__ void st(__half *p, float v) { *p = __float2half_rn(v); }

template <class T, int HD>
__global__ void __launch_bounds__(kThreads) flash_attention_kernel(const float *q, const T *kc, const T *vc, float *out, float *partials,
                                                                   int64_t tokens, int n_head, int n_kv, const int64_t *n_past_ptr,
                                                                   float scale, int64_t row_tiles, int splits, int64_t chunk) {
  constexpr int KS = k_stride<HD>(), D = HD / 32;  // dims per lane in P·V
  extern __shared__ float4 smem4[];
  float *qs = reinterpret_cast<float *>(smem4), *ks = qs + kRows * HD, *vs = ks + kKeys * KS;
  const int64_t n_past = *n_past_ptr;
  const int group = n_head / n_kv, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t rows = tokens * group, kvd = int64_t(n_kv) * HD;
  const int64_t items = int64_t(n_kv) * row_tiles * splits;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int z = int(item % splits);
    const int64_t tile = (item / splits) % row_tiles;
    const int kvh = int(item / (int64_t(splits) * row_tiles));
    const int64_t r0 = tile * kRows;
    __syncthreads();  // the previous item's last tile is consumed before qs/ks/vs are rewritten
    for (int i = threadIdx.x; i < kRows * HD / 4; i += kThreads) {
      const int r = i / (HD / 4), d4 = i % (HD / 4);
      const int64_t row = r0 + r;
      float4 v = make_float4(0, 0, 0, 0);
      if (row < rows) {
        const int64_t t = row / group, h = int64_t(kvh) * group + row % group;
        v = reinterpret_cast<const float4 *>(q + (t * n_head + h) * HD)[d4];
        v.x *= scale, v.y *= scale, v.z *= scale, v.w *= scale;
      }
      reinterpret_cast<float4 *>(qs)[i] = v;
    }
    // The last key each of this warp's rows may see (causal); -1 for rows past the end.
    int64_t limit[kRowsPerWarp];
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t row = r0 + warp * kRowsPerWarp + r;
      limit[r] = row < rows ? n_past + row / group : -1;
    }
    const int64_t last_row = (r0 + kRows < rows ? r0 + kRows : rows) - 1;
    const int64_t begin = int64_t(z) * chunk, end_all = n_past + last_row / group + 1;
    const int64_t end = begin + chunk < end_all ? begin + chunk : end_all;
    float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][D];
    for (int r = 0; r < kRowsPerWarp; ++r) {
      m[r] = -INFINITY, l[r] = 0;
      for (int i = 0; i < D; ++i) acc[r][i] = 0;
    }
    for (int64_t k0 = begin; k0 < end; k0 += kKeys) {
      __syncthreads();  // the previous tile is consumed (and qs written, the first time)
      for (int i = threadIdx.x; i < kKeys * HD / 2; i += kThreads) {
        const int j = i / (HD / 2), d = 2 * (i % (HD / 2));
        const int64_t pos = k0 + j;
        float2 kv = make_float2(0, 0), vv = make_float2(0, 0);
        if (pos < end) {
          kv = load2(kc + pos * kvd + int64_t(kvh) * HD + d);
          vv = load2(vc + pos * kvd + int64_t(kvh) * HD + d);
        }
        ks[j * KS + d] = kv.x, ks[j * KS + d + 1] = kv.y;
        vs[j * HD + d] = vv.x, vs[j * HD + d + 1] = vv.y;
      }
      __syncthreads();
      float s[kRowsPerWarp];
      for (int r = 0; r < kRowsPerWarp; ++r) s[r] = 0;
#pragma unroll 4
      for (int d = 0; d < HD; d += 4) {
        const float4 kk = *reinterpret_cast<const float4 *>(ks + lane * KS + d);
        for (int r = 0; r < kRowsPerWarp; ++r) {
          const float4 qq = *reinterpret_cast<const float4 *>(qs + (warp * kRowsPerWarp + r) * HD + d);
          s[r] += qq.x * kk.x + qq.y * kk.y + qq.z * kk.z + qq.w * kk.w;
        }
      }
      const int64_t pos = k0 + lane;
      for (int r = 0; r < kRowsPerWarp; ++r) {
        if (pos > limit[r] || pos >= end) s[r] = -INFINITY;
        const float m_new = fmaxf(m[r], warp_max(s[r]));
        // A row with no visible key yet keeps m = -inf: its weights are 0, not exp(nan).
        const float p = m_new == -INFINITY ? 0.0f : expf(s[r] - m_new);
        const float corr = m_new == -INFINITY ? 1.0f : expf(m[r] - m_new);
        l[r] = l[r] * corr + warp_sum(p);
        m[r] = m_new;
        for (int i = 0; i < D; ++i) acc[r][i] *= corr;
        s[r] = p;
      }
      for (int j = 0; j < kKeys; ++j) {
        float v[D];
        for (int i = 0; i < D; ++i) v[i] = vs[j * HD + lane + 32 * i];
        for (int r = 0; r < kRowsPerWarp; ++r) {
          const float pj = __shfl_sync(0xffffffffu, s[r], j);
          for (int i = 0; i < D; ++i) acc[r][i] += pj * v[i];
        }
      }
    }
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t row = r0 + warp * kRowsPerWarp + r;
      if (row >= rows) continue;
      if (splits == 1) {
        const int64_t t = row / group, h = int64_t(kvh) * group + row % group;
        const float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
        for (int i = 0; i < D; ++i) out[(t * n_head + h) * HD + lane + 32 * i] = acc[r][i] * inv;
      } else {
        float *p = partials + ((int64_t(z) * n_kv + kvh) * rows + row) * (HD + 2);
        for (int i = 0; i < D; ++i) p[lane + 32 * i] = acc[r][i];
        if (lane == 0) p[HD] = m[r], p[HD + 1] = l[r];
      }
    }
  }
}

// out = sum_z e^(m_z - M) acc_z / sum_z e^(m_z - M) l_z, M = max_z m_z; one block per row.
__global__ void flash_merge_kernel(const float *partials, float *out, int64_t tokens, int n_head, int n_kv, int hd, int splits) {
  const int group = n_head / n_kv;
  const int64_t rows = tokens * group;
  for (int64_t item = blockIdx.x; item < int64_t(n_kv) * rows; item += gridDim.x) {
    const int kvh = int(item / rows);
    const int64_t row = item % rows;
    float mx = -INFINITY;
    for (int z = 0; z < splits; ++z) mx = fmaxf(mx, partials[((int64_t(z) * n_kv + kvh) * rows + row) * (hd + 2) + hd]);
    float denom = 0;
    for (int z = 0; z < splits; ++z) {
      const float *p = partials + ((int64_t(z) * n_kv + kvh) * rows + row) * (hd + 2);
      if (p[hd + 1] > 0) denom += expf(p[hd] - mx) * p[hd + 1];
    }
    const int64_t t = row / group, h = int64_t(kvh) * group + row % group;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
      float num = 0;
      for (int z = 0; z < splits; ++z) {
        const float *p = partials + ((int64_t(z) * n_kv + kvh) * rows + row) * (hd + 2);
        if (p[hd + 1] > 0) num += expf(p[hd] - mx) * p[d];
      }
      out[(t * n_head + h) * hd + d] = denom > 0 ? num / denom : 0.0f;
    }
  }
}

// Decode (one token): the group of query heads sharing a KV head (<= 8) are the rows, and the
// block's 8 warps take interleaved 32-key tiles of its chunk — the rows are few, the keys
// many. K rows are read straight from global memory (lane j reads key j's row), V rows by
// all lanes at once; the warps' running (max, sum, output) are merged in shared memory.
// Split over chunks, the partials go to global memory and the last block of a KV head to
// finish (an atomic counter per head, reset by it) merges them: one launch per step. The
// step's own key (position n_past) is read from k_new/v_new, rounded as the cache keeps it,
// and the block whose chunk holds it writes it into the caches: no separate KV write.
constexpr int kDecodeWarps = 8, kDecodeRows = 8, kDecodeThreads = kDecodeWarps * 32;
constexpr int64_t kDecodeChunk = kDecodeWarps * 32 * 4;  // keys per block: four tiles per warp

template <class T, int HD>
__global__ void __launch_bounds__(kDecodeThreads) flash_decode_kernel(const float *q, const float *k_new, const float *v_new, T *kc, T *vc,
                                                                      float *out, float *partials, int *counters, int n_head, int n_kv,
                                                                      const int64_t *n_past_ptr, float scale, int splits, int64_t chunk) {
  constexpr int D = HD / 32;
  __shared__ float qs[kDecodeRows][HD];
  __shared__ float k_step[HD], v_step[HD];  // the new key and value, as the cache keeps them
  __shared__ float wm[kDecodeWarps][kDecodeRows], wl[kDecodeWarps][kDecodeRows];
  __shared__ float wacc[kDecodeWarps][kDecodeRows][HD];
  __shared__ int last_block;
  const int64_t n_past = *n_past_ptr, kvd = int64_t(n_kv) * HD;
  const int group = n_head / n_kv, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t item = blockIdx.x; item < int64_t(n_kv) * splits; item += gridDim.x) {
    const int z = int(item % splits), kvh = int(item / splits);
    __syncthreads();  // the previous item's shared state is consumed
    for (int i = threadIdx.x; i < kDecodeRows * HD; i += kDecodeThreads) {
      const int r = i / HD, d = i % HD;
      qs[r][d] = r < group ? q[(int64_t(kvh) * group + r) * HD + d] * scale : 0.0f;
    }
    for (int d = threadIdx.x; d < HD; d += kDecodeThreads) {
      k_step[d] = as_cached(k_new[int64_t(kvh) * HD + d], kc);
      v_step[d] = as_cached(v_new[int64_t(kvh) * HD + d], vc);
    }
    __syncthreads();
    const int64_t begin = int64_t(z) * chunk, end = begin + chunk < n_past + 1 ? begin + chunk : n_past + 1;
    if (begin <= n_past && n_past < end)  // this chunk holds the new key: store it for later steps
      for (int i = threadIdx.x; i < HD; i += kDecodeThreads) {
        st(kc + n_past * kvd + int64_t(kvh) * HD + i, k_new[int64_t(kvh) * HD + i]);
        st(vc + n_past * kvd + int64_t(kvh) * HD + i, v_new[int64_t(kvh) * HD + i]);
      }
    float m[kDecodeRows], l[kDecodeRows], acc[kDecodeRows][D];
    for (int r = 0; r < kDecodeRows; ++r) {
      m[r] = -INFINITY, l[r] = 0;
      for (int i = 0; i < D; ++i) acc[r][i] = 0;
    }
    for (int64_t k0 = begin + warp * 32; k0 < end; k0 += kDecodeWarps * 32) {
      const int64_t pos = k0 + lane;
      float s[kDecodeRows];
      for (int r = 0; r < kDecodeRows; ++r) s[r] = 0;
      if (pos < end && pos != n_past) {
        const T *kr = kc + pos * kvd + int64_t(kvh) * HD;
#pragma unroll 8
        for (int d = 0; d < HD; d += 2) {
          const float2 kk = load2(kr + d);
          for (int r = 0; r < kDecodeRows; ++r) s[r] += qs[r][d] * kk.x + qs[r][d + 1] * kk.y;
        }
      } else if (pos == n_past) {
        for (int d = 0; d < HD; ++d)
          for (int r = 0; r < kDecodeRows; ++r) s[r] += qs[r][d] * k_step[d];
      }
      for (int r = 0; r < kDecodeRows; ++r) {
        if (pos >= end) s[r] = -INFINITY;
        const float m_new = fmaxf(m[r], warp_max(s[r]));
        const float p = m_new == -INFINITY ? 0.0f : expf(s[r] - m_new);
        const float corr = m_new == -INFINITY ? 1.0f : expf(m[r] - m_new);
        l[r] = l[r] * corr + warp_sum(p);
        m[r] = m_new;
        for (int i = 0; i < D; ++i) acc[r][i] *= corr;
        s[r] = p;
      }
      const int keys = end - k0 < 32 ? int(end - k0) : 32;
      for (int j = 0; j < keys; ++j) {
        float v[D];
        for (int i = 0; i < D; ++i)
          v[i] = k0 + j == n_past ? v_step[lane + 32 * i] : ldf(vc + (k0 + j) * kvd + int64_t(kvh) * HD + lane + 32 * i);
        for (int r = 0; r < kDecodeRows; ++r) {
          const float pj = __shfl_sync(0xffffffffu, s[r], j);
          for (int i = 0; i < D; ++i) acc[r][i] += pj * v[i];
        }
      }
    }
    for (int r = 0; r < kDecodeRows; ++r) {
      if (lane == 0) wm[warp][r] = m[r], wl[warp][r] = l[r];
      for (int i = 0; i < D; ++i) wacc[warp][r][lane + 32 * i] = acc[r][i];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < group * HD; i += kDecodeThreads) {
      const int r = i / HD, d = i % HD;
      float mx = -INFINITY;
      for (int w = 0; w < kDecodeWarps; ++w) mx = fmaxf(mx, wm[w][r]);
      float num = 0, den = 0;
      for (int w = 0; w < kDecodeWarps; ++w)
        if (wl[w][r] > 0) {
          const float e = expf(wm[w][r] - mx);
          num += e * wacc[w][r][d], den += e * wl[w][r];
        }
      if (splits == 1) {
        out[(int64_t(kvh) * group + r) * HD + d] = den > 0 ? num / den : 0.0f;
      } else {
        float *p = partials + ((int64_t(z) * n_kv + kvh) * group + r) * (HD + 2);
        p[d] = num;
        if (d == 0) p[HD] = mx, p[HD + 1] = den;
      }
    }
    if (splits == 1) continue;
    __threadfence();  // this block's partials are visible before it counts itself done
    __syncthreads();
    if (threadIdx.x == 0) last_block = atomicAdd(&counters[kvh], 1) == splits - 1;
    __syncthreads();
    if (!last_block) continue;
    __threadfence();
    for (int i = threadIdx.x; i < group * HD; i += kDecodeThreads) {
      const int r = i / HD, d = i % HD;
      // __ldcg: other SMs wrote these; skip this SM's L1, which may hold an earlier step's.
      float mx = -INFINITY;
      for (int zz = 0; zz < splits; ++zz) mx = fmaxf(mx, __ldcg(partials + ((int64_t(zz) * n_kv + kvh) * group + r) * (HD + 2) + HD));
      float num = 0, den = 0;
      for (int zz = 0; zz < splits; ++zz) {
        const float *p = partials + ((int64_t(zz) * n_kv + kvh) * group + r) * (HD + 2);
        const float lz = __ldcg(p + HD + 1);
        if (lz > 0) {
          const float e = expf(__ldcg(p + HD) - mx);
          num += e * __ldcg(p + d), den += e * lz;
        }
      }
      out[(int64_t(kvh) * group + r) * HD + d] = den > 0 ? num / den : 0.0f;
    }
    if (threadIdx.x == 0) counters[kvh] = 0;  // ready for the next step (and graph replay)
  }
}

struct Plan {
  int64_t row_tiles, chunk;
  int splits;
  bool decode;  // flash_decode_kernel: one token, <= 8 query heads per KV head
};

constexpr int kMaxDecodeKvHeads = 1024;  // the counters the device keeps (minfer_cuda_flash_counters)

// Splits so that about two blocks per SM are busy, each chunk at least kMinChunk keys.
Plan plan_for(int64_t tokens, int n_head, int n_kv, int64_t max_positions, int sm_count) {
  Plan p{};
  if (tokens == 1 && n_head / n_kv <= kDecodeRows && n_kv <= kMaxDecodeKvHeads) {
    // Chunks of kDecodeChunk keys at least, up to about two blocks per SM.
    const int64_t most = (2 * int64_t(sm_count > 0 ? sm_count : 132) + n_kv - 1) / n_kv;
    int64_t splits = (max_positions + kDecodeChunk - 1) / kDecodeChunk;
    if (splits > most) splits = most;
    if (splits < 1) splits = 1;
    p.decode = true, p.row_tiles = 1, p.splits = int(splits);
    p.chunk = ((max_positions + splits - 1) / splits + 31) / 32 * 32;
    return p;
  }
  p.row_tiles = (tokens * (n_head / n_kv) + kRows - 1) / kRows;
  const int64_t base = int64_t(n_kv) * p.row_tiles, want = 2 * int64_t(sm_count > 0 ? sm_count : 132);
  int64_t splits = base >= want ? 1 : (want + base - 1) / base;
  const int64_t most = (max_positions + kMinChunk - 1) / kMinChunk;
  if (splits > most) splits = most;
  if (splits < 1) splits = 1;
  p.splits = int(splits);
  p.chunk = ((max_positions + splits - 1) / splits + kKeys - 1) / kKeys * kKeys;
  return p;
}

template <class T, int HD>
cudaError_t launch_decode(minfer_cuda_launch_cfg *cfg, const float *q, const float *k_new, const float *v_new, void *kc, void *vc, float *out,
                          float *partials, int *counters, int n_head, int n_kv, const int64_t *n_past, float scale, const Plan &p) {
  const int64_t items = int64_t(n_kv) * p.splits;
  const unsigned grid = unsigned(items < cfg->max_blocks ? items : cfg->max_blocks);
  flash_decode_kernel<T, HD><<<grid, kDecodeThreads, 0, cfg->stream>>>(q, k_new, v_new, static_cast<T *>(kc), static_cast<T *>(vc), out,
                                                                       partials, counters, n_head, n_kv, n_past, scale, p.splits, p.chunk);
  return cudaGetLastError();
}

template <class T, int HD>
cudaError_t launch(minfer_cuda_launch_cfg *cfg, const float *q, const void *kc, const void *vc, float *out, float *partials,
                   int64_t tokens, int n_head, int n_kv, const int64_t *n_past, float scale, const Plan &p) {
  const size_t smem = smem_bytes<HD>();
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(flash_attention_kernel<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
  }
  const int64_t items = int64_t(n_kv) * p.row_tiles * p.splits;
  const unsigned grid = unsigned(items < cfg->max_blocks ? items : cfg->max_blocks);
  flash_attention_kernel<T, HD><<<grid, kThreads, smem, cfg->stream>>>(q, static_cast<const T *>(kc), static_cast<const T *>(vc), out,
                                                                       partials, tokens, n_head, n_kv, n_past, scale, p.row_tiles,
                                                                       p.splits, p.chunk);
  return cudaGetLastError();
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" int minfer_cuda_flash_attention_supports(int32_t head_dim) { return head_dim == 64 || head_dim == 128; }

extern "C" int32_t minfer_cuda_flash_attention_counters() { return kMaxDecodeKvHeads; }

extern "C" int64_t minfer_cuda_flash_attention_partials_bytes(int64_t tokens, int32_t n_head, int32_t n_kv, int32_t head_dim,
                                                              int64_t max_positions, int32_t sm_count) {
  const Plan p = plan_for(tokens, n_head, n_kv, max_positions, sm_count);
  return p.splits == 1 ? 0 : int64_t(p.splits) * tokens * n_head * (head_dim + 2) * int64_t(sizeof(float));
}

extern "C" int minfer_cuda_flash_attention_writes_kv(int64_t tokens, int32_t n_head, int32_t n_kv, int32_t head_dim) {
  return minfer_cuda_flash_attention_supports(head_dim) && plan_for(tokens, n_head, n_kv, 1, 1).decode;
}

extern "C" cudaError_t minfer_cuda_flash_attention(minfer_cuda_launch_cfg *cfg, const float *q, const float *k_new, const float *v_new,
                                                   void *kc, void *vc, int32_t dtype, float *out, float *partials, int *counters, int64_t tokens,
                                                   int32_t n_head, int32_t n_kv, int32_t hd, const int64_t *n_past,
                                                   int64_t max_positions, float scale, int32_t sm_count) {
  const Plan p = plan_for(tokens, n_head, n_kv, max_positions, sm_count);
  cudaError_t e = cudaErrorNotSupported;
  if (p.decode) {
    if (dtype == MINFER_DTYPE_F16 && hd == 64) e = launch_decode<__half, 64>(cfg, q, k_new, v_new, kc, vc, out, partials, counters, n_head, n_kv, n_past, scale, p);
    if (dtype == MINFER_DTYPE_F16 && hd == 128) e = launch_decode<__half, 128>(cfg, q, k_new, v_new, kc, vc, out, partials, counters, n_head, n_kv, n_past, scale, p);
    if (dtype == MINFER_DTYPE_F32 && hd == 64) e = launch_decode<float, 64>(cfg, q, k_new, v_new, kc, vc, out, partials, counters, n_head, n_kv, n_past, scale, p);
    if (dtype == MINFER_DTYPE_F32 && hd == 128) e = launch_decode<float, 128>(cfg, q, k_new, v_new, kc, vc, out, partials, counters, n_head, n_kv, n_past, scale, p);
    cfg->kernel_name = "flash_decode_kernel";
    cfg->kernel_dtype = dtype;
    return e;
  }
  if (dtype == MINFER_DTYPE_F16 && hd == 64) e = launch<__half, 64>(cfg, q, kc, vc, out, partials, tokens, n_head, n_kv, n_past, scale, p);
  if (dtype == MINFER_DTYPE_F16 && hd == 128) e = launch<__half, 128>(cfg, q, kc, vc, out, partials, tokens, n_head, n_kv, n_past, scale, p);
  if (dtype == MINFER_DTYPE_F32 && hd == 64) e = launch<float, 64>(cfg, q, kc, vc, out, partials, tokens, n_head, n_kv, n_past, scale, p);
  if (dtype == MINFER_DTYPE_F32 && hd == 128) e = launch<float, 128>(cfg, q, kc, vc, out, partials, tokens, n_head, n_kv, n_past, scale, p);
  cfg->kernel_name = "flash_attention_kernel";
  cfg->kernel_dtype = dtype;
  if (e != cudaSuccess || p.splits == 1) return e;
  const int64_t rows = tokens * n_head;
  flash_merge_kernel<<<unsigned(rows < cfg->max_blocks ? rows : cfg->max_blocks), 64, 0, cfg->stream>>>(partials, out, tokens, n_head,
                                                                                                       n_kv, hd, p.splits);
  return launched(cfg, "flash_merge_kernel", dtype);
}
