// plugins/cpu/qdot.hpp — integer dot products of quantized weight rows with 8-bit activations.
//
// As fast GGUF engines do, activations are quantized once per matmul to 32-value blocks of
// int8 with an f32 scale; a weight row then dots with them in integer arithmetic, one scale
// multiply per block. Kernels are picked at run time from what the CPU has (AVX-512 VNNI,
// AVX2 or plain C); all compute the same sums in the same order of blocks.
#pragma once

#include <cstdint>
#include <type_traits>

namespace minfer::cpu {

// Calls f(std::integral_constant<int, n>) for n = 1..N.
template <int N, class F>
void by_count(int n, F &&f) {
  if constexpr (N > 1)
    if (n < N) return by_count<N - 1>(n, f);
  f(std::integral_constant<int, N>{});
}

// 32 activations as int8 with their scale: x ~ d * qs.
struct ActBlock {
  float d;
  int32_t sum;   // sum of qs
  float d_sum;   // d * sum: Q4_0 (unsigned nibbles, offset 8) and K-quant mins correct by it
  float d_sum_lo;  // d * the sum of qs[0..15]: Q6_K's scales cover 16 values (int8_gemm.hpp)
  int8_t qs[32];
};


// Dots one weight row of n values (dtype Q4_0, Q5_0, Q8_0, Q4_K, Q5_K or Q6_K here; Q4_1, Q5_1,
// Q2_K and Q3_K through int8_gemm.hpp's unit_row_dots) with the quantized activations of
// n_tok tokens (1..kMaxTokens; token j's blocks start at x + j * x_stride): out[j].
// Each weight block is decoded once for all the tokens. nullptr for other dtypes.
inline constexpr int kMaxTokens = 4;
using QDotFn = void (*)(const void *w_row, const ActBlock *x, int64_t x_stride, int n_tok, int64_t n, float *out);

// The instruction sets the kernels come in, each level including the ones before; the backend
// picks the best the CPU has, or the one its `isa` option names (to test every path on one
// machine). AvxVnni = the AVX2 kernels, with the prompt kernels' integer dots on the 256-bit
// VEX vpdpbusd (Intel Alder Lake and later client CPUs, which have no AVX-512; Sapphire
// Rapids). Amx = the VNNI kernels plus AMX tiles for many-token matmuls (amx_matmul.hpp).
enum class Isa { Scalar, Avx2, AvxVnni, Avx512Vnni, Amx };
// The AVX2 kernel family: AVX2 itself and AVX-VNNI, which differ only where a kernel says so.
inline bool avx2_family(Isa isa) { return isa == Isa::Avx2 || isa == Isa::AvxVnni; }
Isa best_isa();
bool isa_available(Isa isa);
const char *isa_name(Isa isa);
QDotFn qdot_for(int32_t weight_dtype, Isa isa);

// Quantizes n values (a multiple of 32) of x into n / 32 blocks; the same bytes on every isa.
void quantize_activations(const float *x, ActBlock *out, int64_t n, Isa isa);

// Four consecutive weight rows (row_bytes apart) at once, for dtypes and ISAs that have such
// a kernel (nullptr otherwise): out[j * 4 + r] is row r dotted with token j.
using QDot4Fn = void (*)(const uint8_t *w_rows, int64_t row_bytes, const ActBlock *x, int64_t x_stride, int n_tok, int64_t n, float *out);
QDot4Fn qdot4_for(int32_t weight_dtype, Isa isa);

// n f16 values to f32: F16C where the ISA has it (AVX2 implies it here), else plain C.
void halves_to_floats(const uint16_t *h, float *f, int64_t n, Isa isa);

}  // namespace minfer::cpu
