/* plugins/cuda/kernels/launchers.h — the C launchers (hop 3 of op -> device -> launcher -> kernel).
 *
 * Each launcher owns its grid arithmetic: element/block counts in 64-bit, ceil-div grids
 * clamped to cfg->max_blocks (kernels loop grid-stride past the clamp), 256-thread blocks.
 * Each records the kernel it launched in cfg and returns that launch's error (checked right
 * after it), or cudaErrorNotSupported for a dtype it has no kernel for; it never synchronizes. */
#ifndef MINFER_CUDA_LAUNCHERS_H
#define MINFER_CUDA_LAUNCHERS_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct minfer_cuda_launch_cfg {
  cudaStream_t stream;
  int64_t max_blocks;      /* grid clamp: the hardware's limit, or lower to test grid-stride loops */
  const char *kernel_name; /* out: the last kernel launched (static string), for error messages */
  int32_t kernel_dtype;    /* out: the dtype it was instantiated for, or -1 */
  int32_t pdl;             /* launch with programmatic dependent launch (grid.cuh launch_kernel()) */
  int32_t row_groups;      /* staged GEMVs of very many short rows put consecutive rows in one chunk (gemv.cu gemv_row_group) */
  int32_t twin_blocks;     /* staged GEMVs of up to 36 rows an SM: two blocks of kTwinWarps an SM, one row a warp (gemv.cu) */
  int64_t short_rows_from; /* one-token GEMVs of rows of at most 1024 values stage them from this many rows a launch (0: gemv.cu's default) */
} minfer_cuda_launch_cfg;

/* elementwise.cu */
cudaError_t minfer_cuda_add_f32(minfer_cuda_launch_cfg *cfg, const float *a, const float *b,
                                float *y, int64_t n);
cudaError_t minfer_cuda_mul_f32(minfer_cuda_launch_cfg *cfg, const float *a, const float *b,
                                float *y, int64_t n);
cudaError_t minfer_cuda_silu_f32(minfer_cuda_launch_cfg *cfg, const float *x, float *y,
                                 int64_t n);
cudaError_t minfer_cuda_add_row_broadcast_f32(minfer_cuda_launch_cfg *cfg, const float *a,
                                              const float *bias, float *y, int64_t rows, int64_t d);

/* convert.cu: y = x as f16 (round to nearest). saturate: values past f16's range become
 * +-65504 instead of infinities (the f16 matmuls' inputs: an infinity times a zero weight
 * would be a NaN). */
cudaError_t minfer_cuda_convert_f32_f16(minfer_cuda_launch_cfg *cfg, const float *x, uint16_t *y, int64_t n, int32_t saturate);
/* The same saturating conversion with each run of 16 values in mma_f16.cuh's k order (values
 * 0 1 4 5 8 9 12 13, then 2 3 6 7 10 11 14 15), as the wgmma prompt kernel reads x: n a
 * multiple of 16. */
cudaError_t minfer_cuda_convert_f32_f16_mma_order(minfer_cuda_launch_cfg *cfg, const float *x, uint16_t *y, int64_t n);

/* getrows.cu: out[r] = table[ids[r]] as f32. An id outside [0, table_rows) fills its row
 * with NaN and records (error_tag, id) in error_flag[0..1] if error_flag[0] was 0. */
cudaError_t minfer_cuda_get_rows(minfer_cuda_launch_cfg *cfg, int32_t table_dtype,
                                 const void *table, int64_t table_rows, int64_t d,
                                 const int32_t *ids, int64_t n_ids, float *y,
                                 int32_t *error_flag, int32_t error_tag);

/* dequantize.cu: y = f16(x) for a block dtype; n values, a multiple of the block size. */
cudaError_t minfer_cuda_dequantize_f16(minfer_cuda_launch_cfg *cfg, int32_t dtype,
                                       const void *x, uint16_t *y, int64_t n);

/* norm.cu: y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, one block per row. */
cudaError_t minfer_cuda_rms_norm_f32(minfer_cuda_launch_cfg *cfg, const float *x, const float *w, float *y,
                                     int64_t rows, int64_t d, float eps);

/* Per-head RMS norms applied before rotating (Qwen3's q and k norms): w0 the first tensor's
 * (the queries'), w1 the second's (the keys'), head_dim weights each; w0 NULL: none. */
typedef struct minfer_cuda_head_norms {
  const float *w0, *w1;
  float eps;
} minfer_cuda_head_norms;

/* A rotary embedding's parameters (mode 0 = pairs (2i, 2i+1), 2 = NeoX (i, i + n_dims/2)). */
typedef struct {
  int32_t n_dims, mode;
  float theta_base, freq_scale;
  const float *freq_factors; /* device, n_dims/2: each pair's frequency divided by its factor; NULL: none */
  float mscale;              /* the rotated values multiplied by it (cos and sin scaled, as ggml's); 1: none */
  minfer_cuda_head_norms norms;
} minfer_cuda_rope;

/* rope.cu: rotary embedding of tokens x heads x head_dim; mode 0 = pairs (2i, 2i+1), 2 = NeoX.
 * x2 (NULL for none): a second tensor of heads2 heads at the same positions, rotated by the
 * same launch into y2 (a step's queries and keys). rope.norms (w0 NULL for none): each head
 * normalized first, out = x / sqrt(mean over the head of x^2 + eps) * w as MINFER_OP_RMS_NORM
 * with group head_dim (both tensors; x2 required). */
cudaError_t minfer_cuda_rope_f32(minfer_cuda_launch_cfg *cfg, const float *x, const int32_t *pos, float *y,
                                 int64_t tokens, int64_t heads, int32_t head_dim, minfer_cuda_rope rope,
                                 const float *x2, float *y2, int64_t heads2);

/* argmax.cu: out[r] = the first index of row r's largest value (NaN never), x f32 [d, rows];
 * scratch: minfer_cuda_argmax_scratch_bytes of device memory for the chunks' partial bests. */
size_t minfer_cuda_argmax_scratch_bytes(int64_t d, int64_t rows);
cudaError_t minfer_cuda_argmax_f32(minfer_cuda_launch_cfg *cfg, const float *x, int32_t *out, int64_t d, int64_t rows, void *scratch);

/* moe.cu: mixture-of-experts routing (minfer/ops.h TOP_K, MOE_WEIGHTS, MOE_SUM). top_k: the k
 * largest of each row of x f32 [n, rows], largest first, ties to the lower index, NaN last. */
cudaError_t minfer_cuda_top_k_f32(minfer_cuda_launch_cfg *cfg, const float *x, int32_t *out, int64_t n, int64_t k, int64_t rows,
                                  float *weights, int32_t normalize, float scale);
/* Whether top_k can write MOE_WEIGHTS' output in the same launch (weights non-NULL: as
 * minfer_cuda_moe_weights_f32 of x and the ids would): rows of n <= 1024. */
int32_t minfer_cuda_top_k_weights_supported(int64_t n, int64_t k);
/* out[r][j] = softmax(logits[r])[ids[r][j]], divided by their sum over j where normalize, times scale */
cudaError_t minfer_cuda_moe_weights_f32(minfer_cuda_launch_cfg *cfg, const float *logits, const int32_t *ids, float *out, int64_t n_expert,
                                        int64_t k, int64_t rows, int32_t normalize, float scale);
/* out[r] = sum_j w[r][j] y[r][j], y [d, k, rows]; add non-NULL: out[r] = add[r] + that (ADD after it) */
cudaError_t minfer_cuda_moe_sum_f32(minfer_cuda_launch_cfg *cfg, const float *y, const float *w, const float *add, float *out, int64_t d,
                                    int64_t k, int64_t rows);

/* A decode token's router in one launch: RMS_NORM (h = x / rms(x) * norm_w, written for the
 * experts), the router MATMUL (logits = W h, W plain f32/f16/bf16 [k, n_expert]), TOP_K with
 * MOE_WEIGHTS (ids, weights of k_used). counter: a device unsigned, 0 before the launch and 0
 * after it. Supported: k % 4 == 0, k <= 7168, n_expert <= 256; x, norm_w, h and W 16-byte aligned. */
typedef struct {
  const float *x, *norm_w;
  float eps;
  float *h;
  int32_t w_dtype;
  const void *w;
  int64_t k, n_expert, k_used;
  float *logits, *weights;
  int32_t *ids;
  int32_t normalize;
  float scale;
  unsigned *counter;
} minfer_cuda_moe_router;
int32_t minfer_cuda_moe_router_decode_supported(int32_t w_dtype, int64_t k, int64_t n_expert, int64_t k_used);
cudaError_t minfer_cuda_moe_router_decode(minfer_cuda_launch_cfg *cfg, const minfer_cuda_moe_router *router);

/* A decode token's whole routed FFN in one launch: the router above (its norm, matmul, top-k
 * and weights), then y = act(gate_ids x h) * (up_ids x h) [k_used, m], then out = add (when
 * non-NULL) + sum_j weights[j] (down_ids[j] y_j) — what the router, mmvq_id_decode (gated) and
 * mmvq_id_sum_decode launches compute, with their bits. gate/up [k, m, n_expert] and down
 * [m, k, n_expert] of the int8 block types (gate and up alike) on 16 bytes where Q4_K, Q5_K or
 * Q6_K. counters: two device unsigneds, 0 before and after. A cooperative launch, one block an
 * SM: fails (an error, nothing run) where the grid cannot be resident at once. Supported: the
 * router's limits with f32 router weights, n_expert <= 512, k_used <= 32, the type pairs
 * moe.cu lists. */
/* The attention's output projection and its residual add, as the first stage of the one-launch
 * FFNs below: out = add + w x, w [k, n] (n: the model's width) of the FFN's gate type, out the
 * FFN's input (its norm's x). w NULL: none. */
typedef struct {
  const void *w;
  const float *x, *add;
  float *out;
  int64_t k;
} minfer_cuda_ffn_attn_out;

typedef struct {
  minfer_cuda_moe_router router;
  int32_t gate_dtype, down_dtype, act;
  const void *gate, *up, *down;
  int64_t m;
  float *y, *out;
  const float *add;
  unsigned *counters;
  minfer_cuda_ffn_attn_out attn_out;
} minfer_cuda_moe_ffn;
/* ko: the output projection's k where one comes first, else 0. */
int32_t minfer_cuda_moe_ffn_decode_supported(int32_t router_dtype, int32_t gate_dtype, int32_t down_dtype, int64_t k, int64_t m,
                                             int64_t n_expert, int64_t k_used, int64_t ko);
cudaError_t minfer_cuda_moe_ffn_decode(minfer_cuda_launch_cfg *cfg, const minfer_cuda_moe_ffn *ffn, int32_t sm_count);
/* A decode token's dense gated FFN in one launch: y = act(gate h) * (up h) [m] of h = x RMS-normed
 * with norm_w, then out = add (when non-NULL) + down y — the gated GEMV with its norm and the
 * down GEMV with its add as two stages of one cooperative grid (ffn_decode.cu), the routed form
 * above with one expert of weight 1. gate/up [k, m], down [m, k] of the pairs it takes;
 * counters as there. */
typedef struct {
  const float *x, *norm_w;
  float eps;
  int32_t gate_dtype, down_dtype, act;
  const void *gate, *up, *down;
  int64_t k, m;
  float *y, *out;
  const float *add;
  unsigned *counters;
  minfer_cuda_ffn_attn_out attn_out;
} minfer_cuda_ffn;
int32_t minfer_cuda_ffn_decode_supported(int32_t gate_dtype, int32_t down_dtype, int64_t k, int64_t m, int64_t ko);
cudaError_t minfer_cuda_ffn_decode(minfer_cuda_launch_cfg *cfg, const minfer_cuda_ffn *ffn, int32_t sm_count);

/* A step's routing for MATMUL_ID, in device memory (minfer_cuda_moe_route_bytes): the (row,
 * choice) pairs p = row * k + j grouped by expert, and the list of experts with any pair.
 * Built on the device from the ids (no host sync; CUDA-graph safe). A pair whose id is outside
 * [0, n_expert) is left out, its output row y[p] (m values) filled with NaN, and (error_tag,
 * id) recorded in error_flag as get_rows does. */
size_t minfer_cuda_moe_route_bytes(int64_t n_pairs, int64_t n_expert);
int64_t minfer_cuda_moe_route_max_experts(void);
cudaError_t minfer_cuda_moe_route(minfer_cuda_launch_cfg *cfg, const int32_t *ids, int64_t n_pairs, int64_t n_expert, void *route,
                                  float *y, int64_t m, int32_t *error_flag, int32_t error_tag);
/* The expert matmul over a route: y[p] = W[expert of p] x[p's row (x_per_pair: p)], W [k, m,
 * n_expert]. matmul.cu: any weight dtype, f32 x (a warp per expert row, its pairs in turn). */
cudaError_t minfer_cuda_matmul_id(minfer_cuda_launch_cfg *cfg, int32_t w_dtype, const void *w, const float *x, float *y, int64_t k,
                                  int64_t m, int64_t n_expert, int64_t n_pairs, int64_t choices, int32_t x_per_pair, const void *route);
/* moe.cu: the int8 block types of minfer_cuda_mmvq_supported on 8-bit activations (xq: x
 * quantized by minfer_cuda_quantize_q8_act), each expert's rows read once per step for all its
 * pairs over a route. up non-NULL: gated, y[p] = act(gate x) * (up x) with w the gate. */
cudaError_t minfer_cuda_mmvq_id(minfer_cuda_launch_cfg *cfg, int32_t w_dtype, const void *w, const void *up, int32_t act, const void *xq,
                                float *y, int64_t k, int64_t m, int64_t n_expert, int64_t n_pairs, int64_t choices, int32_t x_per_pair,
                                const void *route, int32_t sm_count);
/* The same for one row of choices (a decode token, where minfer_cuda_mmvq_id_decode_supported):
 * no route; the kernel reads the ids itself, a bad id handled as the route kernel does
 * (error_flag, NaN rows), and quantizes its pair's f32 x itself (no quantize launch). */
int32_t minfer_cuda_mmvq_id_decode_supported(int64_t n_pairs, int64_t choices, int64_t k);
cudaError_t minfer_cuda_mmvq_id_decode(minfer_cuda_launch_cfg *cfg, int32_t w_dtype, const void *w, const void *up, int32_t act,
                                       const float *x, float *y, int64_t k, int64_t m, int64_t n_expert, int64_t n_pairs, int64_t choices,
                                       int32_t x_per_pair, const int32_t *ids, int32_t *error_flag, int32_t error_tag, int32_t sm_count);

/* A decode token's expert down matmul and the weighted sum of its choices in one launch:
 * out[o] = add[o] (when add is non-NULL) + sum_p wts[p] * (W_ids[p] x_p)[o], x the choices' rows
 * of k values one after another (f32, quantized by the kernel). A bad id: NaN rows and
 * error_flag, as minfer_cuda_mmvq_id_decode. */
int32_t minfer_cuda_mmvq_id_sum_decode_supported(int32_t w_dtype, int64_t choices, int64_t k);
/* Whether expert weights (and the up half, or null) start where the int8 expert kernels can
 * read them: Q4_K, Q5_K and Q6_K on 16 bytes (those kernels read 16-byte pieces). */
int32_t minfer_cuda_expert_weights_aligned(int32_t w_dtype, const void *w, const void *up);
cudaError_t minfer_cuda_mmvq_id_sum_decode(minfer_cuda_launch_cfg *cfg, int32_t w_dtype, const void *w, const float *x, const int32_t *ids,
                                           const float *wts, const float *add, float *out, int64_t k, int64_t m, int64_t n_expert,
                                           int64_t choices, int32_t *error_flag, int32_t error_tag, int32_t sm_count);

/* A gated FFN's activation of the gate (glu.cuh): SwiGLU's silu, GeGLU's GELU (tanh form). */
enum { MINFER_CUDA_GLU_SILU = 0, MINFER_CUDA_GLU_GELU = 1 };

/* elementwise.cu: y = act(gate) * up, act a MINFER_CUDA_GLU_* */
cudaError_t minfer_cuda_glu_f32(minfer_cuda_launch_cfg *cfg, int32_t act, const float *gate, const float *up, float *y, int64_t n);
/* elementwise.cu: y = scale * x, or softcap * tanh(scale * x / softcap) when softcap > 0 */
cudaError_t minfer_cuda_scale_f32(minfer_cuda_launch_cfg *cfg, const float *x, float *y, int64_t n, float scale, float softcap);

/* The paged KV cache as the attention kernels read it (minfer/ops.h): token t sits at
 * positions[t] of sequence slots[t]; position p of slot s lives in cache row
 * table[s * max_pages + p / page_size] * page_size + p % page_size. All device pointers,
 * rewritten by the host before each step, so a captured graph replays for any step. */
typedef struct minfer_cuda_kv_pages {
  const int32_t *positions; /* [tokens] */
  const int32_t *slots;     /* [tokens] */
  const int32_t *table;     /* [n_slots][max_pages] */
  int64_t max_pages;        /* a slot's row of the table */
  int32_t page_shift;       /* log2(page_size) */
} minfer_cuda_kv_pages;

/* How attention shapes its scores (minfer/ops.h, ABI 1.6): s = q.k * scale, then, with
 * softcap > 0, softcap * tanh(s / softcap); window > 0: the token at position p sees only
 * keys p - window + 1 .. p (sliding-window layers). */
typedef struct minfer_cuda_attn_scores {
  float scale;
  float softcap;
  int32_t window;
} minfer_cuda_attn_scores;

/* attention.cu: write this step's K and V rows into the caches (f16 or f32) at each token's
 * (slot, position). */
cudaError_t minfer_cuda_kv_write(minfer_cuda_launch_cfg *cfg, const float *k, const float *v, void *k_cache,
                                 void *v_cache, int32_t cache_dtype, int64_t tokens, int64_t kv_dim, minfer_cuda_kv_pages kv);
/* attention.cu: causal GQA over the caches; one block per (token, head); max_positions: a
 * sequence's most positions (sizes shared memory once for every step). */
cudaError_t minfer_cuda_attention(minfer_cuda_launch_cfg *cfg, const float *q, const void *k_cache,
                                  const void *v_cache, int32_t cache_dtype, float *out, int64_t tokens,
                                  int32_t n_head, int32_t n_kv_head, int32_t head_dim, minfer_cuda_kv_pages kv,
                                  int64_t max_positions, minfer_cuda_attn_scores scores);
/* The most positions attention handles (its scores live in shared memory). */
int64_t minfer_cuda_attention_max_positions(int device);

/* flash_attention.cu: the same attention, fused (online softmax, key tiles in shared memory,
 * no length limit) for the head dims it is built for; split over the keys when the rows
 * alone would not fill sm_count SMs, the chunks merged through `partials`
 * (minfer_cuda_flash_attention_partials_bytes; 0 = no split, may be NULL) by a second kernel,
 * or in a decode step by the last block of each (token, KV head), which `counters` (that many
 * ints, zeroed once; the kernel leaves them zero) tells. decode: every token of the step is
 * a different sequence's (n_seqs == n_tokens), which the one-token kernel needs: it writes
 * each token's K and V itself, as it reads. max_positions: a sequence's most positions. */
int minfer_cuda_flash_attention_supports(int32_t head_dim);
int32_t minfer_cuda_flash_attention_counters(void);
/* The kernel minfer_cuda_flash_attention runs for such a call; NULL when it runs none. */
const char *minfer_cuda_flash_attention_kernel(int64_t tokens, int decode, int32_t n_head, int32_t n_kv_head, int32_t head_dim,
                                               int32_t cache_dtype);
/* 1 when this call writes the step's K and V rows (k_new, v_new) into the caches itself (the
 * one-token kernel); otherwise minfer_cuda_kv_write must run first. The same calls take
 * `rope` (else NULL): q and k_new arrive unrotated and the kernel rotates each token's at
 * rope_pos[t], so a decode step needs no RoPE launch. */
int minfer_cuda_flash_attention_writes_kv(int64_t tokens, int decode, int32_t n_head, int32_t n_kv_head, int32_t head_dim,
                                          int32_t cache_dtype);
int64_t minfer_cuda_flash_attention_partials_bytes(int64_t tokens, int decode, int32_t n_head, int32_t n_kv_head, int32_t head_dim,
                                                   int32_t cache_dtype, int64_t max_positions, int32_t sm_count);
cudaError_t minfer_cuda_flash_attention(minfer_cuda_launch_cfg *cfg, const float *q, const float *k_new, const float *v_new,
                                        void *k_cache, void *v_cache, int32_t cache_dtype, float *out, float *partials, int *counters,
                                        int64_t tokens, int decode, int32_t n_head, int32_t n_kv_head, int32_t head_dim,
                                        minfer_cuda_kv_pages kv, int64_t max_positions, minfer_cuda_attn_scores scores, int32_t sm_count,
                                        const int32_t *rope_pos, const minfer_cuda_rope *rope);

/* gemv.cu: one token, x in f32: the kernel quantizes x itself (no quantize launch before it);
 * for the int8 block types (qblock.cuh: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) and k
 * whose quantized activation blocks fit in 48 KiB of shared memory. Up to
 * kMinferCudaGemvMaxParts products of the same x, dtype and k in one launch (a layer's Q, K
 * and V): part i: y = w x (+ add: NULL, or m values, a bias or a residual). up: NULL, or a
 * second weight of the one part's shape and dtype: y = act(w x) * (up x) (act: a
 * MINFER_CUDA_GLU_*), an FFN's gate, up and activation in one launch. norm_w: NULL, or x is first RMS-normed with these k weights and
 * eps (x / sqrt(mean(x^2) + eps) * norm_w), the norm folded into the products. */
enum { kMinferCudaGemvMaxParts = 3 };
typedef struct {
  const void *w;
  float *y;
  const float *add;
  int64_t m;
} minfer_cuda_gemv_part;
/* One token over parts of two block types (a layer's Q and K in one, its V in another, as the
 * _M mixes store them): parts [0, first_b) of dtype_a, the rest of dtype_b; the pairs and k
 * minfer_cuda_gemv_mixable names (Q4_K/Q5_K + Q6_K, Q5_0/Q5_1 + Q8_0). Otherwise as
 * minfer_cuda_gemv_quantizing without `up`. */
int minfer_cuda_gemv_mixable(int32_t dtype_a, int32_t dtype_b, int64_t k);
cudaError_t minfer_cuda_gemv_quantizing_mixed(minfer_cuda_launch_cfg *cfg, int32_t dtype_a, int32_t dtype_b,
                                              const minfer_cuda_gemv_part *parts, int32_t n_parts, int32_t first_b, const float *x, int64_t k,
                                              const float *norm_w, float eps, int32_t sm_count);
int minfer_cuda_gemv_quantizing_supported(int32_t dtype, int64_t k);
/* Whether m rows of k values stream through shared memory on the current device
 * (gemv_staged_kernel: past 1024 values, or shorter rows where there are very many of them,
 * where the warps' buffers fit), else one row or a few short rows a warp. */
int minfer_cuda_gemv_staged(const minfer_cuda_launch_cfg *cfg, int64_t k, int64_t m);
/* A decode token's gate/up experts (one row of `choices` ids, one x) through the staged GEMV's
 * rings (gemv_staged_experts_kernel): y[p * m + r] = act(gate_e[r].x) * up_e[r].x for e = ids[p];
 * a bad id's rows NaN and recorded in error_flag as the other expert kernels do. */
int minfer_cuda_experts_staged_supported(int32_t dtype, int64_t k, int64_t m, int64_t choices);
cudaError_t minfer_cuda_experts_staged(minfer_cuda_launch_cfg *cfg, int32_t dtype, const void *w, const void *up, int32_t act,
                                       const float *x, float *y, int64_t k, int64_t m, int64_t n_expert, int64_t choices,
                                       const int32_t *ids, int32_t *error_flag, int32_t error_tag, int32_t sm_count);
cudaError_t minfer_cuda_gemv_quantizing(minfer_cuda_launch_cfg *cfg, int32_t dtype, const minfer_cuda_gemv_part *parts, int32_t n_parts,
                                        const void *up, int32_t act, const float *x, int64_t k, const float *norm_w, float eps,
                                        int32_t sm_count);

/* mmq.cu: y = W x for many tokens on int8 tensor cores, W's blocks read in place (the int8
 * block types), x quantized by minfer_cuda_quantize_mmq_x. Up to kMinferCudaMmqMaxParts
 * weights of the same dtype and k share x in one launch (a layer's Q, K and V; an FFN's gate
 * and up): part i: y = w x (+ add: NULL, or added to y — m values for every token when
 * add_broadcast (a bias), else m values per token). */
enum { kMinferCudaMmqMaxParts = 3 };
typedef struct {
  const void *w;
  float *y;
  const float *add;
  int64_t m;
  int32_t add_broadcast;
} minfer_cuda_mmq_part;
int minfer_cuda_mmq_supported(int32_t dtype);
/* Split-K: where a launch's tiles would leave SMs idle in its last wave, each tile's k range
 * is cut over several blocks, whose partial sums a second kernel adds in a fixed order (the
 * same result every run). split (or NULL: no split): the device's SM count and a scratch
 * buffer of minfer_cuda_mmq_partials_bytes (0: this call does not split). */
typedef struct {
  int32_t sm_count;
  float *partials;
} minfer_cuda_mmq_split;
size_t minfer_cuda_mmq_partials_bytes(int32_t dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts, int64_t k, int64_t tokens,
                                      int32_t sm_count);
/* x (tokens rows of k values, k a multiple of 32) quantized for MMQ into q (16-byte aligned,
 * minfer_cuda_mmq_x_bytes): 8 bits per 32 values, a token's blocks in runs of four. */
size_t minfer_cuda_mmq_x_bytes(int64_t k, int64_t tokens);
cudaError_t minfer_cuda_quantize_mmq_x(minfer_cuda_launch_cfg *cfg, const float *x, void *q, int64_t k, int64_t tokens);
/* The same with an RMS norm folded in: token t's values x[t] * norm_w / sqrt(mean(x[t]^2) +
 * eps), quantized (x, norm_w and q 16-byte aligned). */
cudaError_t minfer_cuda_rms_norm_quantize_mmq_x(minfer_cuda_launch_cfg *cfg, const float *x, const float *norm_w, float eps, void *q,
                                                int64_t k, int64_t tokens);
cudaError_t minfer_cuda_mmq(minfer_cuda_launch_cfg *cfg, int32_t dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts, const void *xq,
                            int64_t k, int64_t tokens, const minfer_cuda_mmq_split *split);
/* An FFN's gate and up weights (same dtype and shape, m rows) and their activation in one
 * launch: y = act(gate x) * (up x). Only for the types minfer_cuda_mmq_glu_supported names. */
int minfer_cuda_mmq_glu_supported(int32_t dtype);
cudaError_t minfer_cuda_mmq_glu(minfer_cuda_launch_cfg *cfg, int32_t dtype, int32_t act, const void *gate, const void *up, const void *xq,
                                float *y, int64_t k, int64_t m, int64_t tokens);

/* mmq_f16.cu: y = W x for many tokens with Q4_0, Q8_0 or K-quant weights on f16 tensor cores, the weights
 * dequantized in registers from their blocks, x as f16 values (minfer_cuda_convert_f32_f16,
 * 16-byte aligned). For the types and k minfer_cuda_mmq_f16_supported names, weights as
 * minfer_cuda_mmq_f16_aligned requires. Parts and split as minfer_cuda_mmq (partials:
 * minfer_cuda_mmq_f16_partials_bytes); up (NULL, or with one part, the gate): y = act(gate x) *
 * (up x) in the same launch, never split. */
int minfer_cuda_mmq_f16_supported(int32_t dtype, int64_t k);
int minfer_cuda_mmq_f16_aligned(int32_t dtype, const void *w);
size_t minfer_cuda_mmq_f16_partials_bytes(int32_t dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts, int64_t k, int64_t tokens,
                                          int32_t sm_count, int32_t wgmma);
/* wgmma non-zero: on Hopper's warpgroup MMA (only where minfer_cuda_wgmma_available), x16 then in
 * the k order of minfer_cuda_convert_f32_f16_mma_order; zero: mma.sync, x16 in order. */
cudaError_t minfer_cuda_mmq_f16(minfer_cuda_launch_cfg *cfg, int32_t dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts, const void *up,
                                int32_t act, const void *x16, int64_t k, int64_t tokens, const minfer_cuda_mmq_split *split, int32_t wgmma);
/* 1 where this GPU runs the plugin's sm_90a code (wgmma): a synchronous probe launch, before any capture. */
int minfer_cuda_wgmma_available(void);

/* few_token_mma.cu, few_token_q6k.cu: a few tokens (1..64; batched decode steps) on tensor
 * cores, the weights read in place: Q4_0's and Q4_K's nibbles on int8 ones with x quantized as for MMQ
 * (minfer_cuda_quantize_mmq_x), Q6_K's values on f16 ones with x as f16 values
 * (minfer_cuda_few_token_x_f16); the parts (or a gate with its up: y = act(gate x) * (up x))
 * in one launch, the work cut evenly over the GPU (stream-K), units cut between blocks summed
 * in a fixed order from `partials` (minfer_cuda_few_token_partials_bytes) by a second kernel. */
int minfer_cuda_few_token_mma_supported(int32_t dtype, int64_t k, int64_t tokens);
int minfer_cuda_few_token_x_f16(int32_t dtype);
size_t minfer_cuda_few_token_partials_bytes(int32_t dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts, const void *up, int64_t k,
                                            int64_t tokens, int32_t sm_count);
cudaError_t minfer_cuda_few_token_mma(minfer_cuda_launch_cfg *cfg, int32_t dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts,
                                      const void *up, int32_t act, const void *x, int64_t k, int64_t tokens, int32_t sm_count,
                                      float *partials);

/* matmul.cu: y[t][o] = sum_i W[o][i] x[t][i] for W of any weight dtype; one warp per row. */
cudaError_t minfer_cuda_matmul(minfer_cuda_launch_cfg *cfg, int32_t w_dtype, const void *w, const float *x,
                               float *y, int64_t k, int64_t m, int64_t tokens);

/* mmvq.cu: the int8 block types with 8-bit activations (dp4a), for a few tokens. Quantize x (n
 * values, a multiple of 32) into q (minfer_cuda_q8_act_bytes), then for each of up to
 * kMinferCudaMmqMaxParts parts (MMQ's part struct: the same dtype and k, sharing x) y = w x
 * (+ add) for `tokens` tokens, in one launch. up: NULL, or a second weight of the one part's
 * shape: y = act(w x) * (up x), an FFN's gate, up and activation (no add). */
size_t minfer_cuda_q8_act_bytes(int64_t k, int64_t tokens);
cudaError_t minfer_cuda_quantize_q8_act(minfer_cuda_launch_cfg *cfg, const float *x, void *q, int64_t n);
int minfer_cuda_mmvq_supported(int32_t dtype);
cudaError_t minfer_cuda_mmvq(minfer_cuda_launch_cfg *cfg, int32_t dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts,
                             const void *up, int32_t act, const void *xq, int64_t k, int64_t tokens, int32_t sm_count);

/* gemm_f16.cu: C[n][m] = X[n][k] W[m][k]^T on tensor cores (f16 in, f32 out); n and m
 * multiples of 64, k a multiple of 16 (cudaErrorInvalidValue otherwise); multiples of 128,
 * 128 and 32 take the faster tiled kernel. */
cudaError_t minfer_cuda_gemm_f16(minfer_cuda_launch_cfg *cfg, const void *x, const void *w, float *c, int64_t n, int64_t m,
                                 int64_t k);

#ifdef __cplusplus
}
#endif

#endif /* MINFER_CUDA_LAUNCHERS_H */
