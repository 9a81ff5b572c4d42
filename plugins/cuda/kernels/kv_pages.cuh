// plugins/cuda/kernels/kv_pages.cuh — where a sequence's position lives in the paged KV cache
// (launchers.h: minfer_cuda_kv_pages) and which keys it sees, for every attention kernel.
#pragma once

#include <cstdint>

#include "launchers.h"

namespace minfer::cuda {

// The cache row of position pos of sequence slot `slot`.
__device__ __forceinline__ int64_t kv_row(const minfer_cuda_kv_pages &kv, int32_t slot, int64_t pos) {
  const int64_t page = kv.table[int64_t(slot) * kv.max_pages + (pos >> kv.page_shift)];
  return (page << kv.page_shift) + (pos & ((int64_t(1) << kv.page_shift) - 1));
}

// The first key the token at position pos sees: 0, or the start of its sliding window.
__device__ __forceinline__ int64_t first_key(const minfer_cuda_attn_scores &a, int64_t pos) {
  return a.window > 0 && pos >= a.window ? pos - a.window + 1 : 0;
}

// A scaled score through the soft cap, where there is one.
__device__ __forceinline__ float cap_score(const minfer_cuda_attn_scores &a, float s) {
  return a.softcap > 0 ? a.softcap * tanhf(s / a.softcap) : s;
}

}  // namespace minfer::cuda
