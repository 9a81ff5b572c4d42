// plugins/cuda/kernels/argmax.cu — each row's largest value's index (greedy sampling on the
// GPU: a decode step of 64 sequences then reads 64 tokens, not 64 rows of 152K logits).
//
// Two passes, so a single row (a one-sequence step) still spreads over the GPU: blocks take
// chunks of kChunk values of a row, each thread 16 of them loaded before any is compared
// (one block per row walking 152K values made the step 0.25 ms slower); a warp per row then
// merges the chunks' bests. The larger value wins, the lower index among equals, and NaN
// never (a row of NaN alone gives 0).
#include "grid.cuh"

namespace minfer::cuda {
namespace {

constexpr int kArgmaxThreads = 256, kPerThread = 16;
constexpr int64_t kChunk = int64_t(kArgmaxThreads) * kPerThread;

struct Best {
  float v;
  int32_t i;  // -1: nothing yet
};

__device__ __forceinline__ Best better(Best a, Best b) {
  if (b.i < 0) return a;
  if (a.i < 0) return b;
  return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}

__device__ __forceinline__ Best warp_best(Best b) {
  for (int o = 16; o > 0; o >>= 1) b = better(b, Best{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)});
  return b;
}

// partial[r * chunks + c]: the best of chunk c of row r.
__global__ void __launch_bounds__(kArgmaxThreads) argmax_chunks_kernel(const float *x, Best *partial, int64_t d, int64_t rows,
                                                                       int64_t chunks) {
  wait_for_inputs();
  __shared__ Best part[kArgmaxThreads / 32];
  for (int64_t item = blockIdx.x; item < rows * chunks; item += gridDim.x) {
    const int64_t r = item / chunks, c0 = (item % chunks) * kChunk;
    const float *row = x + r * d;
    float v[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int64_t i = c0 + j * kArgmaxThreads + threadIdx.x;
      v[j] = i < d ? row[i] : NAN;
    }
    Best b{0, -1};
#pragma unroll
    for (int j = 0; j < kPerThread; ++j)
      if (v[j] == v[j]) b = better(b, Best{v[j], int32_t(c0 + j * kArgmaxThreads + threadIdx.x)});  // v == v: not NaN
    b = warp_best(b);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = b;
    __syncthreads();
    if (threadIdx.x == 0) {
      Best all = part[0];
      for (int w = 1; w < kArgmaxThreads / 32; ++w) all = better(all, part[w]);
      partial[item] = all;
    }
    __syncthreads();  // part is read before the next item rewrites it
  }
}

__global__ void argmax_merge_kernel(const Best *partial, int32_t *out, int64_t rows, int64_t chunks) {
  wait_for_inputs();
  const int lane = threadIdx.x & 31;
  for (int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += int64_t(gridDim.x) * (blockDim.x / 32)) {
    Best b{0, -1};
    for (int64_t c = lane; c < chunks; c += 32) b = better(b, partial[r * chunks + c]);
    b = warp_best(b);
    if (lane == 0) out[r] = b.i < 0 ? 0 : b.i;
  }
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" size_t minfer_cuda_argmax_scratch_bytes(int64_t d, int64_t rows) {
  return size_t(rows) * size_t((d + kChunk - 1) / kChunk) * sizeof(Best);
}

extern "C" cudaError_t minfer_cuda_argmax_f32(minfer_cuda_launch_cfg *cfg, const float *x, int32_t *out, int64_t d, int64_t rows,
                                              void *scratch) {
  if (rows <= 0) return cudaSuccess;
  const int64_t chunks = (d + kChunk - 1) / kChunk, items = rows * chunks;
  launch_kernel(cfg, argmax_chunks_kernel, unsigned(items < cfg->max_blocks ? items : cfg->max_blocks), kArgmaxThreads, 0,
      x, static_cast<Best *>(scratch), d, rows, chunks);
  if (const cudaError_t e = launched(cfg, "argmax_chunks_kernel"); e != cudaSuccess) return e;
  const int64_t blocks = (rows + 7) / 8;
  launch_kernel(cfg, argmax_merge_kernel, unsigned(blocks < cfg->max_blocks ? blocks : cfg->max_blocks), 256, 0, static_cast<Best *>(scratch),
                                                                                                              out, rows, chunks);
  return launched(cfg, "argmax_merge_kernel");
}
