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
  /* out[r] = table[ids[r]] as f32; table f32/f16/bf16/any block type [n_rows][d], ids i32 [n],
     out f32 [n][d]; a block-type table is gathered and dequantized in one pass */
  MINFER_OP_GET_ROWS = 6,
  /* out = a dequantized to f16; a any block type, same shape */
  MINFER_OP_DEQUANTIZE = 7,
  /* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w; x f32 [d, rows], w f32 [d]; minfer_rms_norm_params */
  MINFER_OP_RMS_NORM = 8,
  /* out[t][o] = sum_i W[o][i] * x[t][i]; W [in, out] of any weight dtype (f32, f16, bf16, every
     block type), x f32 [in, n], out f32 [out, n] */
  MINFER_OP_MATMUL = 9,
  /* rotary position embedding: x f32 [n_heads * head_dim, n], pos i32 [n] -> out like x;
     minfer_rope_params */
  MINFER_OP_ROPE = 10, /* ABI 1.4: an optional third input, f32 [n_dims/2] frequency factors:
                        pair i turns by pos * theta_base^(-2i/n_dims) * freq_scale / factor[i]
                        (Llama 3.1+'s rope_freqs) */
  /* causal grouped-query attention over a paged KV cache (ABI 1.5; docs/PLUGIN-ABI.md):
     inputs q f32 [n_head*hd, n], k, v f32 [n_kv*hd, n], k_cache, v_cache (f16 or f32)
     [n_kv*hd, n_pages*page_size], positions i32 [n], slots i32 [n], page_table i32
     [max_pages, n_slots] -> out f32 [n_head*hd, n]. Position p of slot s lives in cache row
     page_table[s][p / page_size] * page_size + p % page_size. Token t writes its k, v at
     (slots[t], positions[t]), then attends to positions 0..positions[t] of its own slot. The
     tokens of one slot are consecutive in a step, in position order. minfer_attention_params.
     (ABI 1.0-1.4 had a 5-input form over one contiguous cache; hosts of 1.5 send only this
     one, and only to plugins of 1.5 or later.) */
  MINFER_OP_ATTENTION = 11,
  /* out = silu(gate) * up; gate, up, out f32, same shape */
  MINFER_OP_SWIGLU = 12,
  /* ABI 1.5: out[r] = the index of the largest value of row r; x f32 [d, rows] -> out i32
     [rows]. The first of equal values wins; NaN is never the largest (a row of NaN alone
     gives 0). Greedy sampling on the device: a step reads a token per row, not its logits. */
  MINFER_OP_ARGMAX = 13,
  /* ABI 1.6: out = gelu(gate) * up, GELU in its tanh form
     0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); gate, up, out f32, same shape (Gemma) */
  MINFER_OP_GEGLU = 14,
  /* ABI 1.6: out = softcap > 0 ? softcap * tanh(scale * x / softcap) : scale * x; f32, any
     shape; minfer_scale_params (Gemma's sqrt(n_embd) embedding scale, its final-logit cap) */
  MINFER_OP_SCALE = 15,
  /* Mixture-of-experts routing and experts (ABI 1.7; docs/PLUGIN-ABI.md):
     TOP_K: out[r] = the indices of the k largest values of row r, largest first (of equal
     values the lower index first; NaN never chosen before a number); x f32 [n, rows] ->
     out i32 [k, rows], k <= n; minfer_top_k_params */
  MINFER_OP_TOP_K = 16,
  /* MOE_WEIGHTS: each row's weights of its chosen experts from its router logits: logits f32
     [n_expert, rows], ids i32 [k, rows] -> out f32 [k, rows]; p = softmax of the row's logits;
     normalize 1: out[j] = p[ids[j]] / sum_j' p[ids[j']] (a softmax over the chosen logits),
     0: out[j] = p[ids[j]]; then times scale. minfer_moe_weights_params */
  MINFER_OP_MOE_WEIGHTS = 17,
  /* MATMUL_ID: each row's matmul with each of its k chosen experts: W [in, out, n_expert] of
     any weight dtype MATMUL takes, x f32 [in, rows] (one input per row, for every expert) or
     [in, k, rows] (one per chosen expert), ids i32 [k, rows] with values in [0, n_expert) ->
     out f32 [out, k, rows], out[r][j] = W[ids[r][j]] x[r] (or x[r][j]). The rows are the
     step's tokens (token dim 2 of out and of a 3-D x, 1 of ids and of a 2-D x). */
  MINFER_OP_MATMUL_ID = 18,
  /* MOE_SUM: y f32 [d, k, rows], w f32 [k, rows] -> out f32 [d, rows],
     out[r] = sum over j = 0..k-1, in that order, of w[r][j] * y[r][j] */
  MINFER_OP_MOE_SUM = 19,
  /* ABI 1.8: tensor parallelism's sum over ranks. One node per rank, x f32 -> out f32 of the
     same shape, out = the sum of every rank's x. Never given to supports or compile: the host
     runs the ranks' nodes together through group_all_reduce (abi.h). */
  MINFER_OP_ALL_REDUCE = 20,
  MINFER_OP_COUNT_ = 21 /* one past the largest id; not an op */
} minfer_op;

/* The common head of every parameter struct. */
typedef struct minfer_params_header {
  size_t struct_size;
} minfer_params_header;

typedef struct minfer_rms_norm_params {
  size_t struct_size;
  float eps;
  /* ABI 1.4: normalize each run of `group` consecutive values of a row on its own, all with
   * the same weight of `group` values (per-head norms of q and k: group = head_dim); 0 = the
   * whole row. A reader whose struct_size does not reach it treats it as 0
   * (sdk::rms_norm_group). */
  int32_t group;
} minfer_rms_norm_params;

typedef enum minfer_rope_mode {
  MINFER_ROPE_NORMAL = 0, /* rotate pairs (x[2i], x[2i+1]): LLaMA */
  MINFER_ROPE_NEOX = 2    /* rotate pairs (x[i], x[i + n_dims/2]): GPT-NeoX, Qwen2 */
} minfer_rope_mode;

typedef struct minfer_rope_params {
  size_t struct_size;
  int32_t mode;       /* minfer_rope_mode */
  int32_t head_dim;   /* values per head; x holds shape[0] / head_dim heads */
  int32_t n_dims;     /* leading dims of each head that rotate (<= head_dim, even) */
  float theta_base;   /* angle of pair i at position p: p * theta_base^(-2i/n_dims) * freq_scale */
  float freq_scale;
  /* ABI 1.6: the rotated values (the first n_dims of each head) multiplied by it, as ggml's
   * rope scales its cos and sin (Phi-3 LongRoPE's rope.scaling.attn_factor); 0, or a
   * struct_size that does not reach it, means 1 (sdk::rope_attn_factor). */
  float attn_factor;
} minfer_rope_params;

typedef struct minfer_attention_params {
  size_t struct_size;
  int32_t head_dim;
  int32_t n_head;
  int32_t n_kv_head; /* n_head is a multiple of it: query head h reads kv head h / (n_head/n_kv_head) */
  float scale;       /* applied to q.k, usually 1/sqrt(head_dim) */
  int32_t page_size; /* ABI 1.5: positions per KV page, a power of two */
  /* ABI 1.6 (a reader whose struct_size does not reach them takes 0 for both;
   * sdk::attention_softcap, sdk::attention_window): */
  float softcap;  /* > 0: each scaled score s becomes softcap * tanh(s / softcap) (Gemma 2) */
  int32_t window; /* > 0: the token at position p attends to positions p - window + 1 .. p only
                     (sliding-window layers); 0: to every earlier position */
} minfer_attention_params;

typedef struct minfer_scale_params {
  size_t struct_size;
  float scale;
  float softcap; /* 0: none */
} minfer_scale_params;

typedef struct minfer_top_k_params {
  size_t struct_size;
  int32_t k; /* 1 <= k <= the row length */
} minfer_top_k_params;

typedef enum minfer_moe_gating {
  MINFER_MOE_GATING_SOFTMAX = 0 /* p = softmax over the row's logits */
} minfer_moe_gating;

typedef struct minfer_moe_weights_params {
  size_t struct_size;
  int32_t gating;    /* minfer_moe_gating */
  int32_t normalize; /* 1: the chosen weights divided by their sum; 0: as they are */
  float scale;       /* every weight multiplied by it (1: none) */
} minfer_moe_weights_params;

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
    case MINFER_OP_RMS_NORM: t.name = "rms_norm"; t.n_inputs = 2; t.params_size = offsetof(minfer_rms_norm_params, eps) + sizeof(float); break; /* ABI 1.0's part */
    case MINFER_OP_MATMUL: t.name = "matmul"; t.n_inputs = 2; break;
    case MINFER_OP_ROPE: t.name = "rope"; t.n_inputs = 2; t.params_size = offsetof(minfer_rope_params, freq_scale) + sizeof(float); break; /* ABI 1.0's part */
    case MINFER_OP_ATTENTION: t.name = "attention"; t.n_inputs = 8; t.params_size = offsetof(minfer_attention_params, page_size) + sizeof(int32_t); break; /* ABI 1.5's part */
    case MINFER_OP_SWIGLU: t.name = "swiglu"; t.n_inputs = 2; break;
    case MINFER_OP_ARGMAX: t.name = "argmax"; t.n_inputs = 1; break;
    case MINFER_OP_GEGLU: t.name = "geglu"; t.n_inputs = 2; break;
    case MINFER_OP_SCALE: t.name = "scale"; t.n_inputs = 1; t.params_size = sizeof(minfer_scale_params); break;
    case MINFER_OP_TOP_K: t.name = "top_k"; t.n_inputs = 1; t.params_size = sizeof(minfer_top_k_params); break;
    case MINFER_OP_MOE_WEIGHTS: t.name = "moe_weights"; t.n_inputs = 2; t.params_size = sizeof(minfer_moe_weights_params); break;
    case MINFER_OP_MATMUL_ID: t.name = "matmul_id"; t.n_inputs = 3; break;
    case MINFER_OP_MOE_SUM: t.name = "moe_sum"; t.n_inputs = 2; break;
    case MINFER_OP_ALL_REDUCE: t.name = "all_reduce"; t.n_inputs = 1; break;
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
