// plugins/cuda/kernels/glu.cuh — a gated FFN's activation, y = act(gate) * up, for every kernel
// that makes it (the fused gate/up matmuls and the elementwise one): one formula for each.
#pragma once

#include <cstdint>

#include "launchers.h"

namespace minfer::cuda {

// silu(g) = g / (1 + e^-g); GELU's tanh form g / (1 + e^(-2 sqrt(2/pi) (g + 0.044715 g^3))),
// the same value as 0.5 g (1 + tanh(...)) without its cancellation far below 0. expf, not
// __expf: within a few ulp of the CPU's.
__device__ __forceinline__ float glu(int32_t act, float gate, float up) {
  const float z = act == MINFER_CUDA_GLU_GELU ? 1.5957691216057308f * fmaf(0.044715f * gate, gate * gate, gate) : gate;
  return gate / (1.0f + expf(-z)) * up;
}

}  // namespace minfer::cuda
