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

struct Plan {
  int64_t row_tiles, chunk;
  int splits;
};

// Splits so that about two blocks per SM are busy, each chunk at least kMinChunk keys.
Plan plan_for(int64_t tokens, int n_head, int n_kv, int64_t max_positions, int sm_count) {
  Plan p{};
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

extern "C" int64_t minfer_cuda_flash_attention_partials_bytes(int64_t tokens, int32_t n_head, int32_t n_kv, int32_t head_dim,
                                                              int64_t max_positions, int32_t sm_count) {
  const Plan p = plan_for(tokens, n_head, n_kv, max_positions, sm_count);
  return p.splits == 1 ? 0 : int64_t(p.splits) * tokens * n_head * (head_dim + 2) * int64_t(sizeof(float));
}

extern "C" cudaError_t minfer_cuda_flash_attention(minfer_cuda_launch_cfg *cfg, const float *q, const void *kc, const void *vc,
                                                   int32_t dtype, float *out, float *partials, int64_t tokens, int32_t n_head,
                                                   int32_t n_kv, int32_t hd, const int64_t *n_past, int64_t max_positions, float scale,
                                                   int32_t sm_count) {
  const Plan p = plan_for(tokens, n_head, n_kv, max_positions, sm_count);
  cudaError_t e = cudaErrorNotSupported;
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
