/* minfer/ops.h — the one op table: ids, names, arity and parameter structs.
 *
 * Tensor shapes are innermost-first (shape[0] is the row length), like GGUF.
 * Every parameter struct starts with struct_size, so a node's params can be copied and
 * checked without knowing the op. Ops whose entry says params "none" take params == NULL. */
#ifndef MINFER_OPS_H
#define MINFER_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum minfer_op {
  MINFER_OP_NONE = 0,
  /* out = a + b; a, b, out f32, same shape */
  MINFER_OP_ADD = 1,
  /* out = a * b; a, b, out f32, same shape */
  MINFER_OP_MUL = 2,
  /* out = a / (1 + exp(-a)); f32 */
  MINFER_OP_SILU = 3,
  /* out[r][i] = a[r][i] + b[i]; a/out [rows][d], b [d]; f32 (bias add) */
  MINFER_OP_ADD_ROW_BROADCAST = 4,
  /* out = a converted to out's dtype; f32 -> f16 (round to nearest even) */
  MINFER_OP_CONVERT = 5,
  /* out[r] = table[ids[r]] as f32; table f32/f16/any block type [n_rows][d], ids i32 [n],
     out f32 [n][d]; a block-type table is gathered and dequantized in one pass */
  MINFER_OP_GET_ROWS = 6,
  /* out = a dequantized to f16; a any block type, same shape */
  MINFER_OP_DEQUANTIZE = 7,
  MINFER_OP_COUNT_ = 8 /* one past the largest id; not an op */
} minfer_op;

/* The common head of every parameter struct. */
typedef struct minfer_params_header {
  size_t struct_size;
} minfer_params_header;

typedef struct minfer_op_traits {
  const char *name;  /* "add_row_broadcast"; NULL for an unknown id */
  int32_t n_inputs;  /* exact input count */
  size_t params_size; /* sizeof the op's params struct at this ABI version; 0 = none */
} minfer_op_traits;

static inline minfer_op_traits minfer_op_info(int32_t op) {
  minfer_op_traits t = {0, 0, 0};
  switch (op) {
    case MINFER_OP_ADD: t.name = "add"; t.n_inputs = 2; break;
    case MINFER_OP_MUL: t.name = "mul"; t.n_inputs = 2; break;
    case MINFER_OP_SILU: t.name = "silu"; t.n_inputs = 1; break;
    case MINFER_OP_ADD_ROW_BROADCAST: t.name = "add_row_broadcast"; t.n_inputs = 2; break;
    case MINFER_OP_CONVERT: t.name = "convert"; t.n_inputs = 1; break;
    case MINFER_OP_GET_ROWS: t.name = "get_rows"; t.n_inputs = 2; break;
    case MINFER_OP_DEQUANTIZE: t.name = "dequantize"; t.n_inputs = 1; break;
    default: break;
  }
  return t;
}

static inline const char *minfer_op_name(int32_t op) {
  const char *n = minfer_op_info(op).name;
  return n ? n : "unknown";
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MINFER_OPS_H */
