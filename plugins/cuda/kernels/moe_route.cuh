// plugins/cuda/kernels/moe_route.cuh — how MATMUL_ID's kernels read a step's routing (moe.cu's
// route kernel writes it): [0] the count of active experts, then (expert, begin, end) per
// active expert, then the pairs grouped by expert (pairs[begin..end) are one expert's).
#pragma once

#include <cstdint>

namespace minfer::cuda {

struct MoeRoute {
  const int32_t *base;
  int64_t max_slots;  // min(n_expert, n_pairs): the most experts a step can activate
  __device__ int32_t n_active() const { return base[0]; }
  __device__ const int32_t *slot(int64_t i) const { return base + 1 + 3 * i; }  // expert, begin, end
  __device__ const int32_t *pairs() const { return base + 1 + 3 * max_slots; }
};

inline int64_t moe_route_slots(int64_t n_pairs, int64_t n_expert) { return n_pairs < n_expert ? n_pairs : n_expert; }

}  // namespace minfer::cuda
