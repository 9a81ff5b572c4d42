// plugins/cuda/kernels/dequantize.cu — any block type -> f16, one thread per block.
//
// One thread per block reads the block's scales once and writes its values contiguously;
// indices are 64-bit because a 7B model's largest tensors exceed 2^31 values.
#include <cuda_fp16.h>

#include "minfer/decode.hpp"
#include "grid.cuh"

namespace minfer::cuda {
namespace {

template <class Block>
__global__ void dequantize_f16_kernel(const Block *x, __half *y, int64_t n_blocks, int32_t per_block) {
  wait_for_inputs();
  MINFER_GRID_STRIDE(b, n_blocks) {
    __half *out = y + b * per_block;
    sdk::decode_block(x[b], [&](int j, float v) { out[j] = __float2half_rn(v); });
  }
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" cudaError_t minfer_cuda_dequantize_f16(minfer_cuda_launch_cfg *cfg, int32_t dtype,
                                                  const void *x, uint16_t *y, int64_t n) {
  cudaError_t err = cudaErrorNotSupported;
  const int32_t per = minfer_dtype_info(dtype).block_values;
  minfer::sdk::visit_block_dtype(dtype, [&](auto tag) {
    using Block = typename decltype(tag)::type;
    const int64_t n_blocks = n / per;
    launch_kernel(cfg, dequantize_f16_kernel<Block>, grid_for(cfg, n_blocks), kBlock, 0,
        static_cast<const Block *>(x), reinterpret_cast<__half *>(y), n_blocks, per);
    err = launched(cfg, "dequantize_f16_kernel", dtype);
  });
  return err;
}
