// plugins/cuda/kernels/rope.cu — rotary position embedding, one thread per rotated pair.
#include "grid.cuh"
#include "reduce.cuh"
#include "rope.cuh"

namespace minfer::cuda {
namespace {

constexpr int kMaxPairs = 256;  // n_dims <= 512 (the launcher checks)

// blockIdx.y picks the tensor: one launch rotates a step's queries and keys together. A warp
// takes a (token, head) row at a time, its lanes the row's pairs; each pair's frequency (a
// double exp and log) is computed once per block into shared memory, not once per element.
// r.norms.w0 non-null: each row is first RMS-normalized with w0 (x0's) or w1 (x1's) head_dim
// weights (Qwen3's per-head q/k norms), as rms_norm_f32_kernel computes it, so the two norm
// launches go.
__global__ void rope_f32_kernel(const float *x0, float *y0, int64_t heads0, const float *x1, float *y1, int64_t heads1,
                                const int32_t *pos, int64_t tokens, int32_t hd, minfer_cuda_rope r) {
  wait_for_inputs();
  __shared__ double frequency[kMaxPairs];
  const float *x = blockIdx.y ? x1 : x0;
  float *y = blockIdx.y ? y1 : y0;
  const int64_t heads = blockIdx.y ? heads1 : heads0;
  const float *nw = r.norms.w0 ? (blockIdx.y ? r.norms.w1 : r.norms.w0) : nullptr;
  const int32_t half = r.n_dims / 2, lane = int32_t(threadIdx.x & 31);
  for (int32_t i = int32_t(threadIdx.x); i < half; i += int32_t(blockDim.x)) frequency[i] = rope_frequency(i, r);
  __syncthreads();
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x >> 5);
  for (int64_t row = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); row < tokens * heads; row += warps) {
    const int32_t p = pos[row / heads];
    const float *xr = x + row * hd;
    float *yr = y + row * hd;
    float scale = 1;
    if (nw) {
      float ss = 0;
      for (int32_t d = lane; d < hd; d += 32) ss += xr[d] * xr[d];
      scale = rsqrtf(warp_sum(ss) / float(hd) + r.norms.eps);
    }
    const auto at = [&](int32_t d) { return nw ? xr[d] * scale * nw[d] : xr[d]; };
    __syncwarp();  // every lane has read the row before any writes it (in place)
    for (int32_t i = lane; i < half; i += 32) {
      int32_t a, b;
      rope_pair_dims(i, r, a, b);
      float c, s;
      rope_cos_sin_at(p, frequency[i], r.mscale, c, s);
      const float xa = at(a), xb = at(b);
      yr[a] = xa * c - xb * s;
      yr[b] = xa * s + xb * c;
    }
    for (int32_t d = r.n_dims + lane; d < hd; d += 32) yr[d] = at(d);  // dims past n_dims pass through
  }
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" cudaError_t minfer_cuda_rope_f32(minfer_cuda_launch_cfg *cfg, const float *x, const int32_t *pos, float *y,
                                            int64_t tokens, int64_t heads, int32_t hd, minfer_cuda_rope r, const float *x2,
                                            float *y2, int64_t heads2) {
  const bool norms = r.norms.w0 != nullptr;
  if (r.n_dims / 2 > kMaxPairs || r.n_dims > hd || (norms && (!x2 || !r.norms.w1))) return cudaErrorInvalidValue;
  const int64_t most_heads = x2 && heads2 > heads ? heads2 : heads;
  const dim3 grid(grid_for(cfg, tokens * most_heads * 32), x2 ? 2 : 1);  // a warp per row
  launch_kernel(cfg, rope_f32_kernel, grid, kBlock, 0, x, y, heads, x2, y2, heads2, pos, tokens, hd, r);
  return launched(cfg, norms ? "rope_f32_kernel (with the per-head RMS norms)" : "rope_f32_kernel");
}
