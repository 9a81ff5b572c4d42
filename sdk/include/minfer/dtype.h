/* minfer/dtype.h — the one element-type table shared by the core, every plugin and every kernel.
 *
 * Ids are GGUF's tensor type ids, so a tensor's type read from a file needs no translation.
 * Block geometry (values per block, bytes per block) is defined here and nowhere else. */
#ifndef MINFER_DTYPE_H
#define MINFER_DTYPE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum minfer_dtype {
  MINFER_DTYPE_F32 = 0,
  MINFER_DTYPE_F16 = 1,
  MINFER_DTYPE_Q4_0 = 2,
  MINFER_DTYPE_Q4_1 = 3,
  /* 4 and 5 were Q4_2/Q4_3 in early GGML; retired, never valid */
  MINFER_DTYPE_Q5_0 = 6,
  MINFER_DTYPE_Q5_1 = 7,
  MINFER_DTYPE_Q8_0 = 8,
  MINFER_DTYPE_Q8_1 = 9,
  MINFER_DTYPE_Q2_K = 10,
  MINFER_DTYPE_Q3_K = 11,
  MINFER_DTYPE_Q4_K = 12,
  MINFER_DTYPE_Q5_K = 13,
  MINFER_DTYPE_Q6_K = 14,
  MINFER_DTYPE_Q8_K = 15,
  /* 16-19, 21, 22: ggml's other i-quants (lattice codebooks); not read */
  MINFER_DTYPE_IQ4_NL = 20, /* 1.11 */
  MINFER_DTYPE_IQ4_XS = 23, /* 1.11 */
  MINFER_DTYPE_I8 = 24,
  MINFER_DTYPE_I16 = 25,
  MINFER_DTYPE_I32 = 26,
  MINFER_DTYPE_I64 = 27,
  MINFER_DTYPE_F64 = 28,
  MINFER_DTYPE_BF16 = 30,
  MINFER_DTYPE_COUNT_ = 31 /* one past the largest id; not a type */
} minfer_dtype;

/* Static facts about one dtype. block_values == 1 for plain (non-block) types. */
typedef struct minfer_dtype_traits {
  const char *name;      /* "q4_0": lower case, as GGUF tools print it; NULL for an unknown id */
  int32_t block_values;  /* values per block (32 for legacy quants, 256 for K-quants) */
  int32_t block_bytes;   /* bytes per block */
  int32_t is_quantized;  /* 1 for block types */
} minfer_dtype_traits;

/* The table itself. Header-only so that a third-party plugin and the host agree by construction. */
static inline minfer_dtype_traits minfer_dtype_info(int32_t dtype) {
  minfer_dtype_traits t = {0, 0, 0, 0};
  switch (dtype) {
    case MINFER_DTYPE_F32: t.name = "f32"; t.block_values = 1; t.block_bytes = 4; break;
    case MINFER_DTYPE_F16: t.name = "f16"; t.block_values = 1; t.block_bytes = 2; break;
    case MINFER_DTYPE_BF16: t.name = "bf16"; t.block_values = 1; t.block_bytes = 2; break;
    case MINFER_DTYPE_F64: t.name = "f64"; t.block_values = 1; t.block_bytes = 8; break;
    case MINFER_DTYPE_I8: t.name = "i8"; t.block_values = 1; t.block_bytes = 1; break;
    case MINFER_DTYPE_I16: t.name = "i16"; t.block_values = 1; t.block_bytes = 2; break;
    case MINFER_DTYPE_I32: t.name = "i32"; t.block_values = 1; t.block_bytes = 4; break;
    case MINFER_DTYPE_I64: t.name = "i64"; t.block_values = 1; t.block_bytes = 8; break;
    case MINFER_DTYPE_Q4_0: t.name = "q4_0"; t.block_values = 32; t.block_bytes = 18; t.is_quantized = 1; break;
    case MINFER_DTYPE_Q4_1: t.name = "q4_1"; t.block_values = 32; t.block_bytes = 20; t.is_quantized = 1; break;
    case MINFER_DTYPE_Q5_0: t.name = "q5_0"; t.block_values = 32; t.block_bytes = 22; t.is_quantized = 1; break;
    case MINFER_DTYPE_Q5_1: t.name = "q5_1"; t.block_values = 32; t.block_bytes = 24; t.is_quantized = 1; break;
    case MINFER_DTYPE_Q8_0: t.name = "q8_0"; t.block_values = 32; t.block_bytes = 34; t.is_quantized = 1; break;
    case MINFER_DTYPE_Q8_1: t.name = "q8_1"; t.block_values = 32; t.block_bytes = 36; t.is_quantized = 1; break;
    case MINFER_DTYPE_Q2_K: t.name = "q2_k"; t.block_values = 256; t.block_bytes = 84; t.is_quantized = 1; break;
    case MINFER_DTYPE_Q3_K: t.name = "q3_k"; t.block_values = 256; t.block_bytes = 110; t.is_quantized = 1; break;
    case MINFER_DTYPE_Q4_K: t.name = "q4_k"; t.block_values = 256; t.block_bytes = 144; t.is_quantized = 1; break;
    case MINFER_DTYPE_Q5_K: t.name = "q5_k"; t.block_values = 256; t.block_bytes = 176; t.is_quantized = 1; break;
    case MINFER_DTYPE_Q6_K: t.name = "q6_k"; t.block_values = 256; t.block_bytes = 210; t.is_quantized = 1; break;
    case MINFER_DTYPE_Q8_K: t.name = "q8_k"; t.block_values = 256; t.block_bytes = 292; t.is_quantized = 1; break;
    case MINFER_DTYPE_IQ4_NL: t.name = "iq4_nl"; t.block_values = 32; t.block_bytes = 18; t.is_quantized = 1; break;
    case MINFER_DTYPE_IQ4_XS: t.name = "iq4_xs"; t.block_values = 256; t.block_bytes = 136; t.is_quantized = 1; break;
    default: break;
  }
  return t;
}

static inline const char *minfer_dtype_name(int32_t dtype) {
  const char *n = minfer_dtype_info(dtype).name;
  return n ? n : "unknown";
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MINFER_DTYPE_H */
