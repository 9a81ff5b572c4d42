// plugins/cpu/int8_gemm.hpp — matmuls of many tokens as a tiled int8 GEMM (AVX-512 VNNI, AVX2).
//
// The row kernels of qdot.hpp dot one weight row with at most four tokens, paying a convert,
// a scale product and an FMA per (row, block, token) beside the integer dot. Here, as BLAS
// packs its panels, each thread repacks 16 weight rows at a time (a chunk of k at a time) into
// the layout the micro-kernel wants: for every 32 values, 8 vectors of [row][4 values] as
// unsigned bytes and the 16 rows' f32 scale and min. One vpdpbusd then takes 16 rows x 4
// values of one token against a broadcast of that token's 4 activations, and the float
// bookkeeping is paid once per (16 rows, 32 values, token). Weights are packed per call into
// a buffer that stays in L2 while every token meets it: no second copy of the model, and the
// same path for `weights: copy` and `weights: mapped`.
#pragma once

#include <cstdint>

#include "qdot.hpp"

namespace minfer::cpu {

class ThreadPool;

// Whether the GEMM runs weights of dtype on isa: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K, IQ4_NL and IQ4_XS on Avx512Vnni (512-bit) and Avx2 (vpmaddubsw; Q8_0 and IQ4 in int16).
bool gemm_takes(int32_t dtype, Isa isa);

// Row dots (QDotFn, one to four tokens) on the GEMM's decoding of Q4_1, Q5_1, Q2_K, Q3_K,
// IQ4_NL and IQ4_XS, the types with no kernel of their own in qdot.cpp (Q3_K under AVX-512 VNNI only: AVX2
// has its own); nullptr for other types and isas.
QDotFn unit_row_dots(int32_t dtype, Isa isa);

// y[t * m + o] = row o of W (m rows of k values, row_bytes apart) dotted with token t, for
// t < tokens; a: the tokens' activations quantized by quantize_activations, k / 32 blocks each.
void int8_gemm(int32_t dtype, Isa isa, const uint8_t *w, int64_t row_bytes, int64_t k, int64_t m, const ActBlock *a, int64_t tokens,
               float *y, ThreadPool &pool);

}  // namespace minfer::cpu
