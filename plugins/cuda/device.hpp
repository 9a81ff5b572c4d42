// plugins/cuda/device.hpp — one CUDA device: its stream, memory, launch checks (hop 2).
//
// Op handlers call these methods with raw device pointers and sizes; each method calls one
// C launcher and turns a failed launch into an sdk::Error that names the kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <span>
#include <vector>

#include "kernels/launchers.h"
#include "minfer/plugin.hpp"

namespace minfer::cuda {

// Throws sdk::Error "<what>: <cuda error string>" unless err is cudaSuccess.
void check_cuda(cudaError_t err, const std::string &what);

// Makes `device` current for the scope (the host may drive several devices from one thread).
class DeviceScope {
 public:
  explicit DeviceScope(int device);
};

struct DeviceOptions {
  bool debug_sync = false;     // synchronize after every launch to pin a failing kernel
  int64_t max_grid_blocks = 0; // 0 = the device's limit; small values exercise grid-stride loops
  bool cuda_graphs = true;     // replay single-token (decode) steps from a captured CUDA Graph
  // Programmatic dependent launch (compute capability 9.0 and later; ignored before): each
  // kernel is scheduled while the previous one drains (kernels/grid.cuh launch_kernel()).
  bool pdl = true;
  // Prefill matmuls of block-quantized weights (the types of kernels/qblock.cuh): true = int8
  // tensor-core GEMM reading the packed blocks (mmq.cu, no f16 copy); false = weights
  // dequantized to f16 + f16 tensor-core GEMM (the path Q2_K always takes).
  bool mmq = true;
  // Of those, Q4_0, Q8_0 and the K-quant types (Q4_K, Q5_K, Q6_K) on f16 tensor cores, the weights
  // dequantized in registers (mmq_f16.cu); false keeps them on int8 MMQ.
  bool mmq_f16 = true;
  // Those on Hopper's warpgroup MMA (wgmma, sm_90a) where the GPU runs the plugin's sm_90a
  // code (compute capability 9.0); false, or any other GPU: mma.sync. Off by default: correct
  // on an H100 but slower than mma.sync so far (7B pp512 Q4_K_M 13,115 against 16,506 t/s).
  bool mmq_wgmma = false;
  // Steps of at least this many tokens take MMQ; fewer (but more than one) take the few-token
  // GEMV (mmvq), whose time grows with the tokens while MMQ's stays flat at few tokens.
  // 0: the measured crossover (mmvq_beats_mmq: by token count and k).
  int64_t mmq_min_tokens = 0;
  // Steps of a few tokens (few_token_mma_wins: 2..64, by measurement) of the types the
  // few-token kernels know take them (Q4_0, Q4_K: int8 tensor cores on the nibbles; Q6_K: f16
  // ones on the values) instead of the GEMV or MMQ: false keeps those two.
  bool few_token_mma = true;
  // A decode token's routed FFN (the router, the gate/up experts, the down experts with their
  // sum) as one cooperative launch with grid barriers (ffn_decode.cu ffn_decode_kernel) where its
  // types allow; false keeps the three launches. Off: correct, but slower than the launches it
  // replaces (H100: its rows loaded straight into registers keep too few bytes in flight;
  // docs/ARCHITECTURE.md has the figures).
  bool moe_ffn_fused = false;
  // The same for a dense gated FFN (its RMS norm, gate/up with the activation, down with the
  // residual add: ffn_decode.cu, one expert of weight 1, one grid barrier) where its types
  // allow; false keeps the gated GEMV and the down GEMV. Off: slower, as the routed form.
  bool dense_ffn_fused = false;
  // With either of those: the attention's output projection and its residual add as the
  // launch's first stage (one grid barrier more) where its weights are of the gate's type.
  // Off: slower still.
  bool attn_out_fused = false;
  // A staged GEMV of very many short rows (a small model's lm_head) copies as many consecutive
  // rows as fit into each 2 KiB chunk of its warps' rings, not one (kernels/gemv.cu
  // gemv_row_group). Measured on an H100: tg128 0.5B Q4_0 1,531 vs 1,482 t/s, Q8_0 1,362 vs
  // 1,322 (four alternating rounds); 1.5B and 7B (longer rows) unchanged.
  bool staged_row_groups = true;
  // Staged rows that the deep form's 28 warps an SM would still leave some warps two of take
  // two blocks of 18 warps an SM (kernels/gemv.cu kTwinWarps: a 7B's 4,608 QKV rows, an 8B's
  // 4,096 O and down rows), one row a warp. Off until measured.
  bool staged_twin_blocks = false;
  // One-token GEMVs of rows of at most 1024 values (a 0.5B's projections) stream them through
  // the warps' rings, as many consecutive rows a chunk as fit, where a launch has at least
  // this many (the default, 32,768: only a small model's lm_head; lower ones await measuring).
  int64_t staged_short_rows_from = 32768;
  // A decode token's gate/up experts stream through the staged GEMV's rings (kernels/gemv.cu
  // gemv_staged_experts_kernel) instead of each lane loading its sub-blocks into registers
  // (moe.cu mmvq_id_decode_kernel: ~36% of DRAM peak on an H100). Off until measured.
  bool staged_expert_pairs = false;
  // Keep an f16 copy of every matmul weight that takes the f16 GEMM (warmed at compile) once
  // the backend's matmul weights total at least this many bytes; below it dequantize per call.
  int64_t w16_cache_min_bytes = int64_t(2) << 30;
};

class CudaDevice {
 public:
  CudaDevice(int device, const DeviceOptions &opts, const sdk::Host &host);
  ~CudaDevice();
  CudaDevice(const CudaDevice &) = delete;
  CudaDevice &operator=(const CudaDevice &) = delete;

  int id() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  const sdk::Host &host() const { return host_; }

  // Device memory; out of memory is an error with the bytes asked for and free.
  void *alloc(uint64_t bytes);
  void release(void *p);

  // A small id for a node name, carried by kernels that report data errors through the flag.
  int32_t register_node(const std::string &name);

  // ---- kernels (one method per launcher) ----
  void add_f32(const float *a, const float *b, float *y, int64_t n);
  void mul_f32(const float *a, const float *b, float *y, int64_t n);
  void silu_f32(const float *x, float *y, int64_t n);
  void add_row_broadcast_f32(const float *a, const float *bias, float *y, int64_t rows, int64_t d);
  void convert_f32_f16(const float *x, uint16_t *y, int64_t n);
  void get_rows(int32_t table_dtype, const void *table, int64_t table_rows, int64_t d,
                const int32_t *ids, int64_t n_ids, float *y, int32_t node_tag);
  void dequantize_f16(int32_t dtype, const void *x, uint16_t *y, int64_t n);
  void rms_norm_f32(const float *x, const float *w, float *y, int64_t rows, int64_t d, float eps);
  // x2/y2/heads2: optionally a second tensor at the same positions, in the same launch.
  // freq_factors (device, n_dims/2; null: none): each pair's frequency divided by its factor.
  void rope_f32(const float *x, const int32_t *pos, float *y, int64_t tokens, int64_t heads, const minfer_rope_params &p,
                const float *freq_factors, const float *x2 = nullptr, float *y2 = nullptr, int64_t heads2 = 0,
                const minfer_cuda_head_norms *norms = nullptr);
  void glu_f32(int32_t act, const float *g, const float *u, float *y, int64_t n);  // y = act(g) * u, act a MINFER_CUDA_GLU_*
  void scale_f32(const float *x, float *y, int64_t n, float scale, float softcap);
  void argmax_f32(const float *x, int32_t *out, int64_t d, int64_t rows);
  // Writes this step's K and V rows into the paged caches, then attends (the one-token kernel
  // does both). decode: each token is a different sequence's (n_seqs == n_tokens).
  // max_positions: a sequence's most. rope (only where attention_rotates): q and k arrive
  // unrotated and are rotated at rope_pos.
  void attention(const float *q, const float *k, const float *v, void *kc, void *vc, int32_t cache_dtype, float *out,
                 int64_t tokens, bool decode, const minfer_attention_params &p, const minfer_cuda_kv_pages &kv, int64_t max_positions,
                 const int32_t *rope_pos = nullptr, const minfer_rope_params *rope = nullptr, const float *rope_factors = nullptr,
                 const minfer_cuda_head_norms *norms = nullptr);
  // Whether attention() can apply the RoPE of q and k itself for such a step.
  bool attention_rotates(int64_t tokens, bool decode, const minfer_attention_params &p, int32_t cache_dtype) const;

  const DeviceOptions &options() const { return opts_; }
  // Changes whenever a buffer captured graphs point to is reallocated: graphs made before are stale.
  uint64_t layout_generation() const { return layout_generation_; }

  // Graph capture of the work enqueued between begin and end on the device's stream.
  void begin_capture();
  cudaGraphExec_t end_capture();
  void launch_graph(cudaGraphExec_t g);
  // How matmul() multiplies: Mmq (int8 tensor cores on the blocks), Gemv (one-token dp4a, x
  // quantized in the kernel, the add and grouping fused), F16Gemm (weights dequantized to f16 —
  // cached per weight or per call — and a tensor-core GEMM), Mmvq (dp4a after a quantize
  // kernel), FewTokenMma (Q4_0, Q4_K and Q6_K, 2..64 tokens on tensor cores, the blocks read in place),
  // Generic (f32 math, any type). The one place the choice is made.
  enum class MatmulPath { Mmq, Gemv, F16Gemm, Mmvq, FewTokenMma, Generic };
  MatmulPath matmul_path(int32_t w_dtype, int64_t k, int64_t tokens) const;
  const void *f16_copy(const void *w) const;  // w's copy in the f16 weight cache, or nullptr
  // Whether an MMQ-path step of these weights (w: nullptr for any aligned one) and this many
  // tokens runs on f16 tensor cores (mmq_f16.cu) rather than int8 MMQ.
  bool mmq_on_f16(int32_t w_dtype, int64_t k, int64_t tokens, const void *w = nullptr) const;
  // Whether those f16 steps run on warpgroup MMA (wgmma) rather than mma.sync.
  bool mmq_wgmma() const { return wgmma_; }
  // y = W x (+ add: m values per token, or m values for every token when add_broadcast). The
  // fast paths add in their epilogue; the others write W x to `unfused` and then add.
  void matmul(int32_t w_dtype, const void *w, const float *x, float *y, int64_t k, int64_t m, int64_t tokens,
              const float *add = nullptr, bool add_broadcast = false, float *unfused = nullptr);
  // Products of one x (a layer's Q, K and V): y = W x (+ add), W's `m` rows of k values.
  struct MatmulPart {
    int32_t dtype;
    const void *w;
    float *y;
    int64_t m;
    const float *add;
    bool add_broadcast;
    float *unfused;
  };
  // An RMS norm folded into the products that read its output: x is then the norm's input.
  struct RmsNormIn {
    const float *w;
    float eps;
  };
  // Whether products of weights of these dtypes (in order) run as one one-token GEMV launch:
  // one dtype, or two where the GEMV mixes them (minfer_cuda_gemv_mixable), the first's parts
  // first.
  bool one_gemv_launch(std::span<const int32_t> dtypes, int64_t k, int64_t tokens) const;
  // Whether a one-token GEMV of m rows of k values streams them through the warps' rings
  // (gemv_staged_kernel), with this device's options.
  bool gemv_staged(int64_t k, int64_t m) const { return minfer_cuda_gemv_staged(&cfg_, k, m) != 0; }
  // Whether a step of these products can take the norm folded in: the one-token GEMV (into its
  // dot products), the few-token tensor-core path (into x's quantizing).
  bool folds_norm(std::span<const int32_t> dtypes, int64_t k, int64_t tokens, const float *norm_w) const;
  // Up to kMinferCudaGemvMaxParts weights of one k: one launch for a decode token where
  // one_gemv_launch says so, one MMQ launch for a prompt when they share a dtype, else each as
  // matmul() runs it. norm: only where folds_norm says so.
  void matmul_group(const float *x, int64_t k, int64_t tokens, const std::vector<MatmulPart> &parts, const RmsNormIn *norm = nullptr);
  // y = act(gate x) * (up x) (SwiGLU, GeGLU): one launch where a kernel fuses it, else the two
  // products (into gate_out, up_out) and the activation.
  void matmul_glu(int32_t act, int32_t w_dtype, const void *gate, const void *up, const float *x, float *y, int64_t k, int64_t m,
                  int64_t tokens, float *gate_out, float *up_out, const RmsNormIn *norm = nullptr);
  // Mixture of experts (moe.cu). top_k, moe_weights, moe_sum: as minfer/ops.h says.
  // weights non-null: MOE_WEIGHTS of the same logits and these ids in the same launch (only
  // where minfer_cuda_top_k_weights_supported).
  void top_k_f32(const float *x, int32_t *out, int64_t n, int64_t k, int64_t rows, float *weights = nullptr, bool normalize = false,
                 float scale = 1);
  void moe_weights_f32(const float *logits, const int32_t *ids, float *out, int64_t n_expert, int64_t k, int64_t rows, bool normalize,
                       float scale);
  // A decode token's RMS norm, router matmul and top-k with weights in one launch, where
  // minfer_cuda_moe_router_decode_supported and the addresses allow; false: run them one by one.
  bool moe_router_decode(minfer_cuda_moe_router r);
  // A decode token's whole routed FFN in one launch (minfer_cuda_moe_ffn_decode), where the
  // option, the types and the addresses allow; false: run its steps as planned.
  bool moe_ffn_decode(minfer_cuda_moe_ffn f);
  // ko > 0: with the attention's output projection (o_dtype, k = ko) as its first stage.
  bool moe_ffn_fusable(int32_t router_dtype, int32_t gate_dtype, int32_t down_dtype, int64_t k, int64_t m, int64_t n_expert, int64_t k_used,
                       int32_t o_dtype = -1, int64_t ko = 0) const;
  // A decode token's dense gated FFN in one launch (minfer_cuda_ffn_decode), likewise.
  bool ffn_decode(minfer_cuda_ffn f);
  bool ffn_fusable(int32_t gate_dtype, int32_t down_dtype, int64_t k, int64_t m, int32_t o_dtype = -1, int64_t ko = 0) const;
  bool attn_out_fusable(int32_t gate_dtype, int32_t o_dtype, int64_t ko) const;
  void moe_sum_f32(const float *y, const float *w, float *out, int64_t d, int64_t k, int64_t rows, const float *add = nullptr);
  // The expert matmul: y [m, choices, rows] with pair p = row * choices + j from expert ids[p]
  // of W [k, m, n_expert], x a row's (x [k, rows]) or the pair's own (x_per_pair). up: gated,
  // y = act(gate x) * (up x), one launch on the int8 path, else gate_out and up_out hold the
  // products. The route is built on the device; a bad id is reported at synchronize.
  struct ExpertMatmul {
    int32_t dtype;
    const void *w, *up;
    int32_t act;
    int64_t k, m, n_expert, choices, rows;
    bool x_per_pair;
  };
  void matmul_id(const ExpertMatmul &e, const float *x, const int32_t *ids, float *y, int32_t node_tag, float *gate_out = nullptr,
                 float *up_out = nullptr);
  static bool int8_experts(const ExpertMatmul &e);  // the experts take moe.cu's dp4a kernel (dtype and k decide)
  // A decode token's gate/up experts on the staged rings (the option staged_expert_pairs).
  bool experts_staged(int32_t dtype, int64_t k, int64_t m, int64_t choices, int64_t rows, bool gated, bool x_per_pair) const;
  static void check_expert_alignment(const ExpertMatmul &e);  // a clear error where those kernels cannot read the weights
  // A decode token's expert matmul (ungated, one row of choices) and the weighted sum of its
  // choices, out = add + sum_p wts[p] y[p], in one launch; false (nothing run) where
  // expert_sum_fusable says no.
  static bool expert_sum_fusable(int32_t dtype, int64_t k, int64_t choices, int64_t rows);
  bool matmul_id_sum(const ExpertMatmul &e, const float *x, const int32_t *ids, const float *wts, const float *add, float *out, int32_t node_tag);
  // A block-type matmul weight in device memory: `rows` rows of `cols` values.
  struct WeightRef {
    int32_t dtype;
    const void *data;
    int64_t rows, cols;
  };
  // Counts a compiled segment's block-type matmul weights; once the backend's total reaches
  // w16_cache_min_bytes, dequantizes each that takes the f16 GEMM to a cached f16 copy.
  void add_matmul_weights(const std::vector<WeightRef> &weights);
  uint64_t w16_cache_bytes() const { return w16_cache_bytes_; }
  int64_t attention_max_positions() const { return attention_max_positions_; }

  // Waits for the stream; reports asynchronous errors and data errors (bad row ids).
  void synchronize();

  // bytes at dst (this device's) = bytes at src_ptr (src's), ordered after the work enqueued so
  // far on both streams and before what either enqueues next: over NVLink/PCIe peer access where
  // the two devices have it (enabled on first use), else CUDA stages through host memory.
  void copy_from(CudaDevice &src, void *dst, const void *src_ptr, uint64_t bytes);

 private:
  // Whether a one-launch FFN's tensors sit where its kernel reads them; warns once if not.
  bool ffn_placed(bool more, const float *x, const float *norm_w, const minfer_cuda_ffn_attn_out &o, int32_t gate_dtype, const void *gate,
                  const void *up, int32_t down_dtype, const void *down, const char *option);
  // After each launch: name the kernel on failure; in debug_sync mode also wait for it.
  void check_launch(cudaError_t err);

  int device_;
  DeviceOptions opts_;
  sdk::Host host_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t copy_event_ = nullptr;  // marks this stream's progress for another device's copy
  minfer_cuda_launch_cfg cfg_{};
  int32_t *error_flag_ = nullptr;  // device int32[2]: (node tag, bad id)
  int32_t *error_flag_host_ = nullptr;  // its pinned host copy, filled by synchronize
  std::vector<std::string> node_names_;
  int64_t attention_max_positions_ = 0;
  // Scratch memory that grows and is reused: [0] quantized activations, [1] f16 weights,
  // [2] f16 activations, [3] the padded f32 GEMM result, [4] split attention's partial rows,
  // [5] split-K MMQ's partial sums, [6] argmax's partial bests, [7] the experts' route.
  void *scratch(int slot, size_t bytes);
  // x quantized once for MMQ, then the parts in one launch, split over k where the tiles
  // would not fill the GPU.
  // Q4_0, Q8_0 and K-quant weights take f16 tensor cores (mmq_f16.cu: x converted to f16 once)
  // where they are aligned for its copies.
  void mmq(int32_t w_dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts, const float *x, int64_t k, int64_t tokens);
  // The few-token dp4a path (mmvq.cu): x quantized once, the parts (or a gate with its up) in one launch.
  void mmvq(int32_t w_dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts, const void *up, int32_t act, const float *x, int64_t k,
            int64_t tokens);
  // The few-token tensor-core path (few_token_mma.cu, few_token_q6k.cu): x quantized once, or
  // to f16 for Q6_K (norm: x is the RMS norm's input, normalized first), the parts (or a gate
  // with its up) in one launch.
  void few_token_mma(int32_t w_dtype, const minfer_cuda_mmq_part *parts, int32_t n_parts, const void *up, int32_t act, const float *x,
                     int64_t k, int64_t tokens, const RmsNormIn *norm = nullptr);
  // x (tokens x k) quantized for MMQ into scratch[0]; valid until the next call.
  const void *quantize_for_mmq(const float *x, int64_t k, int64_t tokens);
  // n values of x as f16 in scratch[2] (16-byte aligned; past f16's range +-65504), for the
  // f16 matmuls; valid until the next call.
  const void *to_f16(const float *x, int64_t n);
  // x as the f16 prompt kernel takes it: to_f16's values, in the wgmma kernel's k order there.
  const void *x_for_mmq_f16(const float *x, int64_t n);
  void *scratch_[8] = {};
  size_t scratch_bytes_[8] = {};
  int32_t sm_count_ = 0;
  bool wgmma_ = false;  // mmq_wgmma and the GPU runs the sm_90a code
  unsigned *router_counter_ = nullptr;  // the fused router's blocks done (moe.cu)
  unsigned *ffn_counters_ = nullptr;  // the one-launch FFNs' barrier counts (ffn_decode.cu)
  bool ffn_refusal_logged_ = false;  // ffn_placed has warned
  int *attention_counters_ = nullptr;  // per (token, KV head): blocks of a split decode step done (flash_attention.cu)
  std::vector<std::pair<const void *, void *>> w16_cache_;  // weight -> its f16 copy (rows padded to 128)
  std::vector<WeightRef> pending_weights_;                  // counted, not cached yet
  uint64_t matmul_weight_bytes_ = 0, w16_cache_bytes_ = 0;
  bool capturing_ = false;
  uint64_t layout_generation_ = 0;
};

}  // namespace minfer::cuda
