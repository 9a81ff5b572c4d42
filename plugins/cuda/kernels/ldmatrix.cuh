// plugins/cuda/kernels/ldmatrix.cuh — tensor-core fragments loaded from shared memory
// (ldmatrix, sm_75+): four 8x8 b16 matrices a warp, lane t giving the address of row t % 8
// of matrix t / 8. The int8 MMQ tiles take them as they are, the attention's V tiles
// transposed.
#pragma once

#include <cstdint>

#include "async_copy.cuh"

namespace minfer::cuda {

// Lane t receives 32 bits of each matrix: row t / 4, bytes 4 (t % 4)... For int8 tiles with
// 16-byte rows that is exactly the mma.m16n8k32 fragment layout.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row))
               : "memory");
}

// Each matrix transposed on the way: lane t receives column t / 4, rows 2 (t % 4) and
// 2 (t % 4) + 1, of each. From rows of keys with their dims along them, that is the A
// fragment of V^T (dims x keys) for mma.m16n8k16.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row))
               : "memory");
}

}  // namespace minfer::cuda
