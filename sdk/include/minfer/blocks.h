/* minfer/blocks.h — byte layouts of every GGUF block type, as files in the wild store them.
 *
 * f16 fields are raw IEEE half bits (uint16_t) so this header stays plain C.
 * Legacy quants hold 32 values per block, K-quants 256 (see minfer/dtype.h).
 * The decoders that turn these bytes into numbers are in minfer/decode.hpp. */
#ifndef MINFER_BLOCKS_H
#define MINFER_BLOCKS_H

#include <stdint.h>

#ifdef __cplusplus
#define MINFER_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define MINFER_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#define MINFER_QK 32    /* values per legacy block */
#define MINFER_QK_K 256 /* values per K-quant super-block */
#define MINFER_K_SCALE_SIZE 12

/* Q4_0: x = d * (q - 8); value j in the low nibble of qs[j], value j+16 in the high nibble. */
typedef struct { uint16_t d; uint8_t qs[MINFER_QK / 2]; } minfer_block_q4_0;
/* Q4_1: x = d * q + m; nibble order as Q4_0. */
typedef struct { uint16_t d; uint16_t m; uint8_t qs[MINFER_QK / 2]; } minfer_block_q4_1;
/* Q5_0: x = d * (q - 16); low 4 bits as Q4_0, bit 4 of value j is bit j of qh (little-endian). */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[MINFER_QK / 2]; } minfer_block_q5_0;
/* Q5_1: x = d * q + m; bits as Q5_0. */
typedef struct { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[MINFER_QK / 2]; } minfer_block_q5_1;
/* Q8_0: x = d * q. */
typedef struct { uint16_t d; int8_t qs[MINFER_QK]; } minfer_block_q8_0;
/* Q8_1: x = d * q; s = d * sum(q), kept for dot products. */
typedef struct { uint16_t d; uint16_t s; int8_t qs[MINFER_QK]; } minfer_block_q8_1;

/* Q2_K: 16 sub-blocks of 16; scales[i] low nibble = scale, high nibble = min;
 * x = d * scale * q - dmin * min, q is 2 bits. */
typedef struct {
  uint8_t scales[MINFER_QK_K / 16];
  uint8_t qs[MINFER_QK_K / 4];
  uint16_t d;
  uint16_t dmin;
} minfer_block_q2_k;
/* Q3_K: 16 sub-blocks of 16 with 6-bit signed scales (offset 32) packed in 12 bytes;
 * q is 2 low bits from qs plus a high bit from hmask (clear high bit means q - 4). */
typedef struct {
  uint8_t hmask[MINFER_QK_K / 8];
  uint8_t qs[MINFER_QK_K / 4];
  uint8_t scales[MINFER_K_SCALE_SIZE];
  uint16_t d;
} minfer_block_q3_k;
/* Q4_K: 8 sub-blocks of 32 with 6-bit scale and min packed in 12 bytes; x = d*sc*q - dmin*m. */
typedef struct {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[MINFER_K_SCALE_SIZE];
  uint8_t qs[MINFER_QK_K / 2];
} minfer_block_q4_k;
/* Q5_K: as Q4_K plus one high bit per value in qh. */
typedef struct {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[MINFER_K_SCALE_SIZE];
  uint8_t qh[MINFER_QK_K / 8];
  uint8_t qs[MINFER_QK_K / 2];
} minfer_block_q5_k;
/* Q6_K: 16 sub-blocks of 16 with int8 scales; q = 4 low bits (ql) + 2 high bits (qh) - 32. */
typedef struct {
  uint8_t ql[MINFER_QK_K / 2];
  uint8_t qh[MINFER_QK_K / 4];
  int8_t scales[MINFER_QK_K / 16];
  uint16_t d;
} minfer_block_q6_k;
/* Q8_K: x = d * q with an f32 scale; bsums are sums of 16-value groups for dot products. */
typedef struct {
  float d;
  int8_t qs[MINFER_QK_K];
  int16_t bsums[MINFER_QK_K / 16];
} minfer_block_q8_k;

/* IQ4_NL: x = d * v[q], q a 4-bit index (nibble order as Q4_0) into 16 fixed int8 values that
 * sit closer together near zero, where trained weights gather:
 * v = -127 -104 -83 -65 -49 -35 -22 -10 1 13 25 38 53 69 89 113, packed little-endian as
 * bytes of the two words below (v[q] = byte q % 8 of LO for q < 8, of HI for q >= 8). */
#define MINFER_IQ4_VALUES_LO 0xF6EADDCFBFAD9881ull
#define MINFER_IQ4_VALUES_HI 0x7159453526190D01ull
typedef struct { uint16_t d; uint8_t qs[MINFER_QK / 2]; } minfer_block_iq4_nl;
/* IQ4_XS: 8 sub-blocks of 32 IQ4_NL indices under one d; sub-block j's scale is
 * (6 bits: low 4 in nibble j % 2 of scales_l[j / 2], high 2 at bits 2j of scales_h) - 32,
 * x = d * scale * v[q]; sub-block j's indices are qs[16 j .. 16 j + 15], nibble order as Q4_0. */
typedef struct {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[MINFER_QK_K / 64];
  uint8_t qs[MINFER_QK_K / 2];
} minfer_block_iq4_xs;

MINFER_STATIC_ASSERT(sizeof(minfer_block_q4_0) == 18, "q4_0 block is 18 bytes");
MINFER_STATIC_ASSERT(sizeof(minfer_block_q4_1) == 20, "q4_1 block is 20 bytes");
MINFER_STATIC_ASSERT(sizeof(minfer_block_q5_0) == 22, "q5_0 block is 22 bytes");
MINFER_STATIC_ASSERT(sizeof(minfer_block_q5_1) == 24, "q5_1 block is 24 bytes");
MINFER_STATIC_ASSERT(sizeof(minfer_block_q8_0) == 34, "q8_0 block is 34 bytes");
MINFER_STATIC_ASSERT(sizeof(minfer_block_q8_1) == 36, "q8_1 block is 36 bytes");
MINFER_STATIC_ASSERT(sizeof(minfer_block_q2_k) == 84, "q2_k block is 84 bytes");
MINFER_STATIC_ASSERT(sizeof(minfer_block_q3_k) == 110, "q3_k block is 110 bytes");
MINFER_STATIC_ASSERT(sizeof(minfer_block_q4_k) == 144, "q4_k block is 144 bytes");
MINFER_STATIC_ASSERT(sizeof(minfer_block_q5_k) == 176, "q5_k block is 176 bytes");
MINFER_STATIC_ASSERT(sizeof(minfer_block_q6_k) == 210, "q6_k block is 210 bytes");
MINFER_STATIC_ASSERT(sizeof(minfer_block_q8_k) == 292, "q8_k block is 292 bytes");
MINFER_STATIC_ASSERT(sizeof(minfer_block_iq4_nl) == 18, "iq4_nl block is 18 bytes");
MINFER_STATIC_ASSERT(sizeof(minfer_block_iq4_xs) == 136, "iq4_xs block is 136 bytes");

#endif /* MINFER_BLOCKS_H */
