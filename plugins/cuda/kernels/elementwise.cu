// plugins/cuda/kernels/elementwise.cu — f32 elementwise family: one thread per element.
#include "glu.cuh"
#include "grid.cuh"

namespace minfer::cuda {
namespace {

// y = a + b
__global__ void add_f32_kernel(const float *a, const float *b, float *y, int64_t n) {
  wait_for_inputs();
  MINFER_GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}

// y = a * b
__global__ void mul_f32_kernel(const float *a, const float *b, float *y, int64_t n) {
  wait_for_inputs();
  MINFER_GRID_STRIDE(i, n) y[i] = a[i] * b[i];
}

// y = x / (1 + e^-x); expf, not __expf, to stay within a few ulp of the CPU reference.
__global__ void silu_f32_kernel(const float *x, float *y, int64_t n) {
  wait_for_inputs();
  MINFER_GRID_STRIDE(i, n) y[i] = x[i] / (1.0f + expf(-x[i]));
}

// y[r][c] = a[r][c] + bias[c], over the flattened rows*d elements.
__global__ void add_row_broadcast_f32_kernel(const float *a, const float *bias, float *y,
                                             int64_t total, int64_t d) {
  wait_for_inputs();
  MINFER_GRID_STRIDE(i, total) y[i] = a[i] + bias[i % d];
}

// y = act(g) * u (glu.cuh)
__global__ void glu_f32_kernel(int32_t act, const float *g, const float *u, float *y, int64_t n) {
  wait_for_inputs();
  MINFER_GRID_STRIDE(i, n) y[i] = glu(act, g[i], u[i]);
}

// y = scale * x, or softcap * tanh(scale * x / softcap) when softcap > 0.
__global__ void scale_f32_kernel(const float *x, float *y, int64_t n, float scale, float softcap) {
  wait_for_inputs();
  if (softcap > 0) {
    const float pre = scale / softcap;
    MINFER_GRID_STRIDE(i, n) y[i] = softcap * tanhf(pre * x[i]);
  } else {
    MINFER_GRID_STRIDE(i, n) y[i] = scale * x[i];
  }
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" cudaError_t minfer_cuda_add_f32(minfer_cuda_launch_cfg *cfg, const float *a,
                                           const float *b, float *y, int64_t n) {
  launch_kernel(cfg, add_f32_kernel, grid_for(cfg, n), kBlock, 0, a, b, y, n);
  return launched(cfg, "add_f32_kernel");
}

extern "C" cudaError_t minfer_cuda_mul_f32(minfer_cuda_launch_cfg *cfg, const float *a,
                                           const float *b, float *y, int64_t n) {
  launch_kernel(cfg, mul_f32_kernel, grid_for(cfg, n), kBlock, 0, a, b, y, n);
  return launched(cfg, "mul_f32_kernel");
}

extern "C" cudaError_t minfer_cuda_silu_f32(minfer_cuda_launch_cfg *cfg, const float *x,
                                            float *y, int64_t n) {
  launch_kernel(cfg, silu_f32_kernel, grid_for(cfg, n), kBlock, 0, x, y, n);
  return launched(cfg, "silu_f32_kernel");
}

extern "C" cudaError_t minfer_cuda_add_row_broadcast_f32(minfer_cuda_launch_cfg *cfg,
                                                         const float *a, const float *bias,
                                                         float *y, int64_t rows, int64_t d) {
  const int64_t total = rows * d;
  launch_kernel(cfg, add_row_broadcast_f32_kernel, grid_for(cfg, total), kBlock, 0, a, bias, y,
                                                                                 total, d);
  return launched(cfg, "add_row_broadcast_f32_kernel");
}

extern "C" cudaError_t minfer_cuda_scale_f32(minfer_cuda_launch_cfg *cfg, const float *x, float *y, int64_t n, float scale, float softcap) {
  launch_kernel(cfg, scale_f32_kernel, grid_for(cfg, n), kBlock, 0, x, y, n, scale, softcap);
  return launched(cfg, "scale_f32_kernel");
}

extern "C" cudaError_t minfer_cuda_glu_f32(minfer_cuda_launch_cfg *cfg, int32_t act, const float *g, const float *u, float *y, int64_t n) {
  launch_kernel(cfg, glu_f32_kernel, grid_for(cfg, n), kBlock, 0, act, g, u, y, n);
  return launched(cfg, act == MINFER_CUDA_GLU_GELU ? "glu_f32_kernel (gelu)" : "glu_f32_kernel (silu)");
}
