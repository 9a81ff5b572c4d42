// plugins/cuda/kernels/gemm_f16.cu — C = X W^T on tensor cores, f16 inputs, f32 accumulation.
//
// The prefill path for block-type weights: the weights are dequantized to f16 and the
// activations converted (by the dequantize/convert kernels), then this GEMM. X [n][k] and
// W [m][k] are both row-major with k contiguous (W^T read column-major); n, m are padded by
// the caller to multiples of 64 and k is a multiple of 16. Each 128-thread block computes a
// 64 x 64 tile of C, each warp 32 x 32 as 2 x 2 WMMA fragments of 16 x 16 x 16, reading the
// fragments straight from global memory (L1/L2 serve the reuse). A shared-memory pipelined
// version (and the int8 MMQ path) comes next.
#include <cuda_fp16.h>
#include <mma.h>

#include "grid.cuh"

namespace minfer::cuda {
namespace {

using namespace nvcuda;

constexpr int kTile = 64;

__global__ void gemm_f16_kernel(const __half *x, const __half *w, float *c, int64_t n, int64_t m, int64_t k) {
  const int warp = threadIdx.x >> 5;
  const int64_t row0 = int64_t(blockIdx.y) * kTile + (warp >> 1) * 32;  // tokens
  const int64_t col0 = int64_t(blockIdx.x) * kTile + (warp & 1) * 32;   // outputs
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  for (int64_t kk = 0; kk < k; kk += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], x + (row0 + 16 * i) * k + kk, unsigned(k));
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], w + (col0 + 16 * j) * k + kk, unsigned(k));
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(c + (row0 + 16 * i) * m + col0 + 16 * j, acc[i][j], unsigned(m), wmma::mem_row_major);
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" cudaError_t minfer_cuda_gemm_f16(minfer_cuda_launch_cfg *cfg, const void *x, const void *w, float *c, int64_t n,
                                            int64_t m, int64_t k) {
  if (n % kTile || m % kTile || k % 16 || m / kTile > 2147483647 || n / kTile > 65535) return cudaErrorInvalidValue;
  const dim3 grid(unsigned(m / kTile), unsigned(n / kTile));
  gemm_f16_kernel<<<grid, 128, 0, cfg->stream>>>(static_cast<const __half *>(x), static_cast<const __half *>(w), c, n, m, k);
  return launched(cfg, "gemm_f16_kernel");
}
