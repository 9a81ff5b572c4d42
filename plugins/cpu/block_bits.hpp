// plugins/cpu/block_bits.hpp — a block's packed values as 32 bytes (AVX2): the unpacking that
// the row dots (qdot.cpp) and the GEMM's packing (int8_gemm.cpp) share.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "minfer/blocks.h"

namespace minfer::cpu {

// 16 bytes of nibbles -> 32 values 0..15: byte j the low nibble of qs[j], byte 16 + j its high one.
__attribute__((target("avx2"))) inline __m256i nibbles32(const uint8_t *qs16) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i *>(qs16));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(0x0f));
}

// IQ4_NL/IQ4_XS: 16 bytes of 4-bit indices -> their 32 signed table values (-127..113), in
// nibbles32's order; the table (blocks.h's two words) in both 128-bit lanes for vpshufb.
__attribute__((target("avx2"))) inline __m256i iq4_values32(const uint8_t *qs16) {
  const __m256i table = _mm256_set_epi64x(int64_t(MINFER_IQ4_VALUES_HI), int64_t(MINFER_IQ4_VALUES_LO), int64_t(MINFER_IQ4_VALUES_HI),
                                          int64_t(MINFER_IQ4_VALUES_LO));
  return _mm256_shuffle_epi8(table, nibbles32(qs16));
}

// Byte i of the result is 0x10 when bit i of the 32-bit word at p is set, else 0 (Q5_0/Q5_1's
// fifth bits).
__attribute__((target("avx2"))) inline __m256i high_bits_0x10(const uint8_t *p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  // Bytes 0-7 look at qh byte 0, 8-15 at byte 1 (first 128-bit lane), 16-23 at 2, 24-31 at 3.
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int(bits)),
                                             _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2,
                                                              2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i which = _mm256_set1_epi64x(0x8040201008040201);  // byte i tests bit i % 8
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, which), which);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Q3_K's 16 six-bit scales as signed bytes (-32..31): low 4 bits from bytes 0..7 (low nibbles,
// then high), the high 2 bits of scale 4k + i at bit 2k of byte 8 + i.
__attribute__((target("avx2"))) inline __m128i q3_k_scales16(const uint8_t *scales) {
  const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(scales));
  const __m128i lo = _mm_and_si128(_mm_unpacklo_epi64(q, _mm_srli_epi16(q, 4)), _mm_set1_epi8(0x0f));
  int32_t word;
  std::memcpy(&word, scales + 8, 4);
  const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(word), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(0x03));
  return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
}

}  // namespace minfer::cpu
