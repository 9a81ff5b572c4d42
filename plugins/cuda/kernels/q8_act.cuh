// plugins/cuda/kernels/q8_act.cuh — activations quantized to 8 bits per 32 values, as the
// integer matmuls (gemv.cu, mmvq.cu: dp4a GEMVs; mmq.cu: tensor-core GEMM) read them.
#pragma once

#include <cstdint>

struct minfer_cuda_q8_act {  // one block of 32 quantized activations
  float d;                   // scale: x ~ d * q
  float s;                   // d * sum(q)
  int32_t qs[8];             // the 32 int8 values, as words for dp4a
};

// Bytes of ns blocks in shared memory rounded up to 16: where the 16-byte copies that follow
// them (the GEMVs' weight chunks and rows) start.
__host__ __device__ constexpr size_t q8_blocks_bytes16(int64_t ns) { return (size_t(ns) * sizeof(minfer_cuda_q8_act) + 15) / 16 * 16; }

// MMQ's layout: a token's blocks in runs of four, scales first, so a stage of 128 values is
// whole 16-byte pieces (two of scales, eight of values) that cp.async copies as they are. A
// token's row is ceil(k / 128) runs; the last run's blocks past k are zeros.
struct minfer_cuda_q8_act4 {
  float2 ds[4];    // (d, s) of each block, as in minfer_cuda_q8_act
  int32_t qs[32];  // the 128 int8 values, block after block
};
static_assert(sizeof(minfer_cuda_q8_act4) == 160, "MMQ copies a run as ten 16-byte pieces");
