// plugins/cuda/kernels/mma_f16.cuh — what the kernels on f16 tensor cores share: the mma
// (with ldmatrix.cuh's fragment loads for the attention kernels, flash_attention.cu), packing
// f16 pairs, and for those that
// dequantize K-quant weights in registers (few_token_q6k.cu: a few tokens; mmq_f16.cu:
// prompts) the 0x6400 trick that makes small integers f16 in one instruction and Q6_K's
// half-block words as they sit in shared memory.
//
// The mma's k order is free as long as A and B agree: a lane's k pairs (2q, 2q+1) and (2q+8,
// 2q+9) are taken as a 16-value run's values 4q..4q+3, so a lane's A for a row is four packed
// values (one word of nibbles or 6-bit values) and its B one 8-byte load of f16 x.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "ldmatrix.cuh"

namespace minfer::cuda {

// c += a . b, f16 in, f32 accumulated: c[2h + j] is row g + 8h, token 2q + j.
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_half2(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t *>(&h);
}

__device__ __forceinline__ __half2 as_half2(uint32_t u) { return *reinterpret_cast<const __half2 *>(&u); }
__device__ __forceinline__ uint32_t as_word(__half2 h) { return *reinterpret_cast<const uint32_t *>(&h); }

// Bytes 0, 1 (kHigh: 2, 3) of u as an f16 pair 1024 + byte: 0x64xx is exactly that.
template <bool kHigh>
__device__ __forceinline__ __half2 bytes_1024(uint32_t u) {
  return as_half2(__byte_perm(u, 0x64646464u, kHigh ? 0x4342 : 0x4140));
}

// Q6_K's half-blocks (128 values) in shared memory: per row its 64 bytes of ql, 32 of qh, the
// 8 scales and d, each piece copied by 4-byte words from the block's 4-byte floor (an odd
// block starts 2 bytes in: its words are read across two; k a multiple of 512 keeps every
// row's start on a word). Words v of a row: ql (0..16), qh (17..25), scales (26..28), d (29).
namespace q6k_half {
constexpr int kBytes = 210;
constexpr int kQlWord = 0, kQhWord = 17, kScWord = 26, kDWord = 29, kCopyWords = 30;

// Byte offset from a block's 4-byte floor of shared word v of half h.
__host__ __device__ __forceinline__ int piece_offset(int v, int h) {
  return v < kQhWord ? 64 * h + 4 * v : v < kScWord ? 128 + 32 * h + 4 * (v - kQhWord) : v < kDWord ? 192 + 8 * h + 4 * (v - kScWord) : 208;
}

// The 4 bytes at `byte` (a multiple of 4) of the piece at word v.
template <bool kOdd>
__device__ __forceinline__ uint32_t piece_word(const uint32_t *row, int v, int byte) {
  if constexpr (!kOdd) return row[v + byte / 4];
  return __byte_perm(row[v + byte / 4], row[v + byte / 4 + 1], 0x5432);
}

template <bool kOdd>
__device__ __forceinline__ float scale_d(const uint32_t *row) {
  const uint32_t dw = row[kDWord];
  return __half2float(__ushort_as_half(uint16_t(kOdd ? dw >> 16 : dw)));
}

// The four 6-bit values of sub-runs 0..3 (values l, l + 32, l + 64, l + 96 of the half, l =
// l0 + 4q..) from a lane's words of ql's two runs and of qh.
__device__ __forceinline__ void unpack(uint32_t lo, uint32_t hi, uint32_t qh, uint32_t (&u)[4]) {
  u[0] = (lo & 0x0F0F0F0Fu) | ((qh << 4) & 0x30303030u);
  u[1] = (hi & 0x0F0F0F0Fu) | ((qh << 2) & 0x30303030u);
  u[2] = ((lo >> 4) & 0x0F0F0F0Fu) | (qh & 0x30303030u);
  u[3] = ((hi >> 4) & 0x0F0F0F0Fu) | ((qh >> 2) & 0x30303030u);
}
}  // namespace q6k_half

// Four 6-bit values (bytes of u) as two f16 pairs times the sub-block's scale s: 1024 + q,
// minus 1056, is q - 32 exactly.
__device__ __forceinline__ void dequant6(uint32_t u, __half2 s, uint32_t &lo, uint32_t &hi) {
  const __half2 bias = __float2half2_rn(1056.0f);
  lo = as_word(__hmul2(__hsub2(bytes_1024<false>(u), bias), s));
  hi = as_word(__hmul2(__hsub2(bytes_1024<true>(u), bias), s));
}

}  // namespace minfer::cuda
