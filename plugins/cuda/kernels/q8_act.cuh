// plugins/cuda/kernels/q8_act.cuh — activations quantized to 8 bits per 32 values, as the
// integer matmuls (gemv.cu, mmvq.cu: dp4a GEMVs; mmq.cu: tensor-core GEMM) read them.
#pragma once

#include <cstdint>

struct minfer_cuda_q8_act {  // one block of 32 quantized activations
  float d;                   // scale: x ~ d * q
  float s;                   // d * sum(q)
  int32_t qs[8];             // the 32 int8 values, as words for dp4a
};
