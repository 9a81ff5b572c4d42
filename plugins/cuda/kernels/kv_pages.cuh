// plugins/cuda/kernels/kv_pages.cuh — where a sequence's position lives in the paged KV cache
// (launchers.h: minfer_cuda_kv_pages), for every attention kernel.
#pragma once

#include <cstdint>

#include "launchers.h"

namespace minfer::cuda {

// The cache row of position pos of sequence slot `slot`.
__device__ __forceinline__ int64_t kv_row(const minfer_cuda_kv_pages &kv, int32_t slot, int64_t pos) {
  const int64_t page = kv.table[int64_t(slot) * kv.max_pages + (pos >> kv.page_shift)];
  return (page << kv.page_shift) + (pos & ((int64_t(1) << kv.page_shift) - 1));
}

}  // namespace minfer::cuda
