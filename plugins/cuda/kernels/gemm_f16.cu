// plugins/cuda/kernels/gemm_f16.cu — C = X W^T on tensor cores, f16 inputs, f32 accumulation.
//
// The prefill path for block-type weights: the weights are dequantized to f16 and the
// activations converted (by the dequantize/convert kernels), then this GEMM. X [n][k] and
// W [m][k] are both row-major with k contiguous (W^T read column-major); n, m are padded by
// the caller to multiples of 128 (64 at least) and k is a multiple of 32 (16 at least). The
// tiled kernel below stages tiles in shared memory; the simple one (64 x 64 tiles, fragments
// straight from global memory) serves shapes the tiled one cannot. Async copies, deeper
// pipelining and wgmma (sm_90a) are the next steps; the int8 MMQ path too.
#include <cuda_fp16.h>
#include <mma.h>

#include "grid.cuh"

namespace minfer::cuda {
namespace {

using namespace nvcuda;

constexpr int kTile = 64;

__global__ void gemm_f16_kernel(const __half *x, const __half *w, float *c, int64_t n, int64_t m, int64_t k) {
  wait_for_inputs();
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

// Tiled version: a 128 x 128 tile of C per 256-thread block; 32-wide slices of k staged in
// shared memory with 16-byte loads, rows padded by 8 halves so the fragment loads of
// neighbouring rows fall in different banks. Each warp computes 32 x 64 (2 x 4 fragments).
constexpr int kBM = 128, kBN = 128, kBK = 32, kPadK = kBK + 8;

__global__ void __launch_bounds__(256) gemm_f16_tiled_kernel(const __half *x, const __half *w, float *c, int64_t n, int64_t m,
                                                             int64_t k) {
  wait_for_inputs();
  __shared__ __align__(32) __half as[kBM][kPadK];
  __shared__ __align__(32) __half bs[kBN][kPadK];
  const int tid = threadIdx.x, warp = tid >> 5;
  const int wm = warp >> 1, wn = warp & 1;  // warp tile: tokens 32*wm.., outputs 64*wn..
  const int64_t row0 = int64_t(blockIdx.y) * kBM, col0 = int64_t(blockIdx.x) * kBN;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  for (int64_t k0 = 0; k0 < k; k0 += kBK) {
    // 128 rows x 32 halves per operand = 512 16-byte pieces: two per thread each.
#pragma unroll
    for (int it = 0; it < 2; ++it) {
      const int i = tid + it * 256, r = i >> 2, cc = (i & 3) * 8;
      *reinterpret_cast<uint4 *>(&as[r][cc]) = *reinterpret_cast<const uint4 *>(x + (row0 + r) * k + k0 + cc);
      *reinterpret_cast<uint4 *>(&bs[r][cc]) = *reinterpret_cast<const uint4 *>(w + (col0 + r) * k + k0 + cc);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[4];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &as[wm * 32 + 16 * i][kk], kPadK);
#pragma unroll
      for (int j = 0; j < 4; ++j) wmma::load_matrix_sync(b[j], &bs[wn * 64 + 16 * j][kk], kPadK);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
      wmma::store_matrix_sync(c + (row0 + wm * 32 + 16 * i) * m + col0 + wn * 64 + 16 * j, acc[i][j], unsigned(m),
                              wmma::mem_row_major);
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" cudaError_t minfer_cuda_gemm_f16(minfer_cuda_launch_cfg *cfg, const void *x, const void *w, float *c, int64_t n,
                                            int64_t m, int64_t k) {
  if (n % kTile || m % kTile || k % 16 || m / kTile > 2147483647 || n / kTile > 65535) return cudaErrorInvalidValue;
  if (n % kBM == 0 && m % kBN == 0 && k % kBK == 0) {
    const dim3 grid(unsigned(m / kBN), unsigned(n / kBM));
    launch_kernel(cfg, gemm_f16_tiled_kernel, grid, 256, 0, static_cast<const __half *>(x), static_cast<const __half *>(w), c, n, m, k);
    return launched(cfg, "gemm_f16_tiled_kernel");
  }
  const dim3 grid(unsigned(m / kTile), unsigned(n / kTile));
  launch_kernel(cfg, gemm_f16_kernel, grid, 128, 0, static_cast<const __half *>(x), static_cast<const __half *>(w), c, n, m, k);
  return launched(cfg, "gemm_f16_kernel");
}
