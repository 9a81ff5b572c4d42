// plugins/cuda/kernels/rope.cu — rotary position embedding, one thread per rotated pair.
#include "grid.cuh"
#include "rope.cuh"

namespace minfer::cuda {
namespace {

// blockIdx.y picks the tensor: one launch rotates a step's queries and keys together.
__global__ void rope_f32_kernel(const float *x0, float *y0, int64_t heads0, const float *x1, float *y1, int64_t heads1,
                                const int32_t *pos, int64_t tokens, int32_t hd, minfer_cuda_rope r) {
  const float *x = blockIdx.y ? x1 : x0;
  float *y = blockIdx.y ? y1 : y0;
  const int64_t heads = blockIdx.y ? heads1 : heads0;
  const int32_t half = r.n_dims / 2, n_dims = r.n_dims;
  const int64_t pairs = tokens * heads * half;
  MINFER_GRID_STRIDE(w, pairs) {
    const int64_t t = w / (heads * half), h = (w / half) % heads;
    const int32_t i = int32_t(w % half);
    const int64_t base = (t * heads + h) * hd;
    int32_t a, b;
    rope_pair_dims(i, r, a, b);
    float c, s;
    rope_cos_sin(pos[t], i, r, c, s);
    const float xa = x[base + a], xb = x[base + b];
    y[base + a] = xa * c - xb * s;
    y[base + b] = xa * s + xb * c;
  }
  // Dims past n_dims pass through unrotated.
  const int64_t rest = tokens * heads * (hd - n_dims);
  MINFER_GRID_STRIDE(w, rest) {
    const int64_t th = w / (hd - n_dims);
    const int64_t at = th * hd + n_dims + w % (hd - n_dims);
    y[at] = x[at];
  }
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" cudaError_t minfer_cuda_rope_f32(minfer_cuda_launch_cfg *cfg, const float *x, const int32_t *pos, float *y,
                                            int64_t tokens, int64_t heads, int32_t hd, int32_t n_dims, int32_t mode,
                                            float theta_base, float freq_scale, const float *x2, float *y2, int64_t heads2) {
  const int64_t most_heads = x2 && heads2 > heads ? heads2 : heads;
  const int64_t work = tokens * most_heads * (n_dims / 2 > hd - n_dims ? n_dims / 2 : hd - n_dims);
  const dim3 grid(grid_for(cfg, work), x2 ? 2 : 1);
  const minfer_cuda_rope r{n_dims, mode, theta_base, freq_scale};
  rope_f32_kernel<<<grid, kBlock, 0, cfg->stream>>>(x, y, heads, x2, y2, heads2, pos, tokens, hd, r);
  return launched(cfg, "rope_f32_kernel");
}
