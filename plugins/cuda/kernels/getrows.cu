// plugins/cuda/kernels/getrows.cu — embedding gather: out[r] = table[ids[r]] as f32.
//
// Plain tables: one thread per output element. Block tables: one thread per (row, block),
// fused gather + dequantize: the block's scales are read once and its values land contiguously.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "minfer/decode.hpp"
#include "grid.cuh"

namespace minfer::cuda {
namespace {

// Records the first bad id: (tag, id) into flag[0..1], once.
__device__ void report_bad_id(int32_t *flag, int32_t tag, int32_t id) {
  if (atomicCAS(flag, 0, tag) == 0) flag[1] = id;
}

__device__ float load_plain(const float *p) { return *p; }
__device__ float load_plain(const __half *p) { return __half2float(*p); }
__device__ float load_plain(const __nv_bfloat16 *p) { return __bfloat162float(*p); }

template <class T>
__global__ void get_rows_plain_kernel(const T *table, int64_t table_rows, int64_t d,
                                      const int32_t *ids, int64_t n_ids, float *y, int32_t *flag,
                                      int32_t tag) {
  wait_for_inputs();
  MINFER_GRID_STRIDE(i, n_ids * d) {
    const int64_t r = i / d, c = i % d;
    const int32_t id = ids[r];
    if (id < 0 || id >= table_rows) {
      if (c == 0) report_bad_id(flag, tag, id);
      y[i] = __int_as_float(0x7fc00000);  // NaN: a bad id must not look like data
      continue;
    }
    y[i] = load_plain(table + int64_t(id) * d + c);
  }
}

template <class Block>
__global__ void get_rows_block_kernel(const Block *table, int64_t table_rows, int64_t d,
                                      int32_t per_block, const int32_t *ids, int64_t n_ids,
                                      float *y, int32_t *flag, int32_t tag) {
  wait_for_inputs();
  const int64_t blocks_per_row = d / per_block;
  MINFER_GRID_STRIDE(i, n_ids * blocks_per_row) {
    const int64_t r = i / blocks_per_row, b = i % blocks_per_row;
    const int32_t id = ids[r];
    float *out = y + r * d + b * per_block;
    if (id < 0 || id >= table_rows) {
      if (b == 0) report_bad_id(flag, tag, id);
      for (int j = 0; j < per_block; ++j) out[j] = __int_as_float(0x7fc00000);
      continue;
    }
    sdk::decode_block(table[int64_t(id) * blocks_per_row + b], [&](int j, float v) { out[j] = v; });
  }
}

}  // namespace
}  // namespace minfer::cuda

using namespace minfer::cuda;

extern "C" cudaError_t minfer_cuda_get_rows(minfer_cuda_launch_cfg *cfg, int32_t dtype,
                                            const void *table, int64_t table_rows, int64_t d,
                                            const int32_t *ids, int64_t n_ids, float *y,
                                            int32_t *flag, int32_t tag) {
  if (dtype == MINFER_DTYPE_F32) {
    launch_kernel(cfg, get_rows_plain_kernel<float>, grid_for(cfg, n_ids * d), kBlock, 0,
        static_cast<const float *>(table), table_rows, d, ids, n_ids, y, flag, tag);
    return launched(cfg, "get_rows_plain_kernel", dtype);
  }
  if (dtype == MINFER_DTYPE_F16) {
    launch_kernel(cfg, get_rows_plain_kernel<__half>, grid_for(cfg, n_ids * d), kBlock, 0,
        static_cast<const __half *>(table), table_rows, d, ids, n_ids, y, flag, tag);
    return launched(cfg, "get_rows_plain_kernel", dtype);
  }
  if (dtype == MINFER_DTYPE_BF16) {
    launch_kernel(cfg, get_rows_plain_kernel<__nv_bfloat16>, grid_for(cfg, n_ids * d), kBlock, 0,
        static_cast<const __nv_bfloat16 *>(table), table_rows, d, ids, n_ids, y, flag, tag);
    return launched(cfg, "get_rows_plain_kernel", dtype);
  }
  cudaError_t err = cudaErrorNotSupported;
  const int32_t per = minfer_dtype_info(dtype).block_values;
  minfer::sdk::visit_block_dtype(dtype, [&](auto tag_type) {
    using Block = typename decltype(tag_type)::type;
    launch_kernel(cfg, get_rows_block_kernel<Block>, grid_for(cfg, n_ids * (d / per)), kBlock, 0,
        static_cast<const Block *>(table), table_rows, d, per, ids, n_ids, y, flag, tag);
    err = launched(cfg, "get_rows_block_kernel", dtype);
  });
  return err;
}
