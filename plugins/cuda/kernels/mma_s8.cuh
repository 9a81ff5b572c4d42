// plugins/cuda/kernels/mma_s8.cuh — the int8 tensor-core product of the block matmuls (mmq.cu,
// few_token_mma.cu): one 32-value block of 16 weight rows times one of 8 tokens.
//
// Tried: starting the accumulator from the bits of 1.5 * 2^23, so the int32 result reads as
// that float plus c and one FADD replaces the I2F conversion: bit-identical, and 2-5% slower
// on the H200 (MMQ at 512 tokens, the few-token kernel at 16-64): the conversion was not the
// bound, the extra FP32 instruction was.
#pragma once

#include <cstdint>

namespace minfer::cuda {

// c[2h + j] = row g + 8h, token 2q + j of a . b (g = lane / 4, q = lane % 4).
__device__ __forceinline__ void mma_s8(int (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
               : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0));
}

}  // namespace minfer::cuda
