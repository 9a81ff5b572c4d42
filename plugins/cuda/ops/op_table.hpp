// plugins/cuda/ops/op_table.hpp — the CUDA plugin's one op table (hop 1 handlers).
//
// supports() and dispatch both read these entries: an op is supported exactly when it has an
// entry and the entry's check passes.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "cuda_buffer.hpp"
#include "device.hpp"
#include "minfer/tensor.hpp"

namespace minfer::cuda {

struct CudaOp {
  int32_t op;
  // Limits beyond the SDK's op contract; "" = supported.
  std::string (*check)(const minfer_node &n);
  // Validates the run-time invariants, picks the path and calls the device.
  void (*run)(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t node_tag);
};

// A decode step: each of its tokens is a different sequence's (ABI 1.5's n_seqs), as the
// one-token attention kernel needs.
inline bool is_decode(const minfer_step_args &args, int64_t tokens) { return sdk::step_seqs(args) == tokens; }

// The positions the step's attention plans for: the host's max_positions (ABI 1.9) rounded up
// to a power of two from 256 (so a captured decode graph serves every step up to it: the
// graphs are keyed by this bucket), or 0 where the host did not say.
inline int64_t positions_bucket(const minfer_step_args &args) {
  const int64_t said = sdk::step_max_positions(args);
  if (said <= 0) return 0;
  int64_t b = 256;
  while (b < said) b *= 2;
  return b;
}
// ... at most the cache's capacity (a sequence's page table row: `capacity` positions), which
// is the plan where the host did not say.
inline int64_t attention_positions(const minfer_step_args &args, int64_t capacity) {
  const int64_t b = positions_bucket(args);
  return b > 0 && b < capacity ? b : capacity;
}

// A matmul fused with the add that follows it (plugin.cpp finds the pairs at compile): the
// add's other input (a bias or a residual) goes into the matmul's epilogue and the add's
// output is written directly; the matmul's own output, read by nothing else, is scratch.
void run_matmul_add(CudaDevice &dev, const minfer_node &matmul, const minfer_node &add, const minfer_step_args &args);

// Matmuls of the same input, weight dtype and k (a layer's Q, K and V), each alone or with
// its add as in run_matmul_add, independent of each other: one launch for a decode token.
struct MatmulStep {
  const minfer_node *matmul;
  const minfer_node *add;  // nullptr: the matmul alone
};
// norm (here and below): an RMS_NORM whose output is the steps' input and that only these
// consecutive steps read (a layer's Q/K group and a V of another weight type share one); a
// one-token GEMV folds it in, other paths run it first — once: `ran`, the segment's and reset
// every run, names the norm whose kernel already ran this run.
struct StepNorm {
  const minfer_node *node = nullptr;
  const minfer_node **ran = nullptr;
};
void run_matmul_group(CudaDevice &dev, std::span<const MatmulStep> steps, const minfer_step_args &args, StepNorm norm = {});

// The FFN's gate and up matmuls (same input, weight dtype and shape) and the SWIGLU or GEGLU
// of their outputs, which nothing else reads, as one step.
void run_matmul_glu(CudaDevice &dev, const minfer_node &gate, const minfer_node &up, const minfer_node &glu,
                    const minfer_step_args &args, StepNorm norm = {});

// MOE_SUM and the residual ADD of its output: one launch (FusionPlan::fuse_sum_add).
void run_moe_sum_add(CudaDevice &dev, const minfer_node &sum, const minfer_node &add, const minfer_step_args &args);
// A decode token's expert down MATMUL_ID, the MOE_SUM of its output and (add non-null) the
// sum's residual ADD in one launch; false (nothing run) where the kernel does not apply.
bool run_matmul_id_sum(CudaDevice &dev, const minfer_node &mm, const minfer_node &sum, const minfer_node *add, const minfer_step_args &args,
                       int32_t tag);
// TOP_K and the MOE_WEIGHTS of its logits and ids: one launch (FusionPlan::fuse_top_k_weights).
void run_top_k_weights(CudaDevice &dev, const minfer_node &top_k, const minfer_node &weights, const minfer_step_args &args);
// RMS_NORM, the router MATMUL of its output and the router's fused TOP_K/MOE_WEIGHTS in one
// launch (FusionPlan::fuse_router) for a decode token; false (nothing run): a prompt, or
// addresses the kernel does not take.
bool run_moe_router(CudaDevice &dev, const minfer_node &norm, const minfer_node &router, const minfer_node &top_k, const minfer_node &weights,
                    const minfer_step_args &args);
// The experts' gate and up MATMUL_IDs (same x, ids, weight dtype and shape) and the SWIGLU
// or GEGLU of their outputs as one step (one launch on the int8 path).
void run_matmul_id_glu(CudaDevice &dev, const minfer_node &gate, const minfer_node &up, const minfer_node &glu, const minfer_step_args &args,
                       int32_t tag);

// A routed FFN's nodes (FusionPlan::moe_ffn_last): the fused router's four, the gated
// experts' three, the down experts and their sum, and the sum's residual ADD (or null).
// o, o_add (both or neither): the attention's output projection and its residual ADD, run
// as the launch's first stage (FusionPlan::o_ffn).
struct MoeFfnNodes {
  const minfer_node *norm, *router, *top_k, *weights, *gate, *up, *glu, *down, *sum, *add;
  const minfer_node *o = nullptr, *o_add = nullptr;
};
// A decode token's routed FFN in one launch (ffn_decode_kernel); false (nothing run): a
// larger step, the option off, or types and addresses the kernel does not take.
bool run_moe_ffn(CudaDevice &dev, const MoeFfnNodes &nodes, const minfer_step_args &args);

// A dense gated FFN's nodes (FusionPlan::ffn_last): the RMS norm folded into the gate/up step,
// the gate, up and activation, the down matmul and its residual ADD (or null).
struct DenseFfnNodes {
  const minfer_node *norm, *gate, *up, *glu, *down, *add;
  const minfer_node *o = nullptr, *o_add = nullptr;  // as MoeFfnNodes'
};
// The attention output projection's launch arguments (w NULL where o is null).
minfer_cuda_ffn_attn_out attn_out_args(const minfer_node *o, const minfer_node *o_add);
// A decode token's dense FFN in one launch (ffn_decode_kernel); false (nothing run): a larger
// step, the option off, or types and addresses the kernel does not take.
bool run_dense_ffn(CudaDevice &dev, const DenseFfnNodes &nodes, const minfer_step_args &args);

// A SWIGLU or GEGLU node's activation (launchers.h: MINFER_CUDA_GLU_*).
inline int32_t glu_act(const minfer_node &n) { return n.op == MINFER_OP_GEGLU ? MINFER_CUDA_GLU_GELU : MINFER_CUDA_GLU_SILU; }

// Two ROPE nodes at the same positions with the same parameters (a step's queries and keys),
// independent of each other, in one launch.
// norm_a, norm_b (both or neither): the per-head RMS_NORMs whose outputs a and b rotate, run
// inside the same launch (FusionPlan::fuse_rope_norms): a and b then read the norms' inputs.
void run_rope_pair(CudaDevice &dev, const minfer_node &a, const minfer_node &b, const minfer_step_args &args,
                   const minfer_node *norm_a = nullptr, const minfer_node *norm_b = nullptr);

// Such a pair (a step's queries and keys) and the ATTENTION that reads both outputs, which
// nothing else reads: a one-token step attends with the rotation inside its kernel (no RoPE
// launch); other steps run the pair, then the attention. norm_a, norm_b: as for
// run_rope_pair, applied by the attention kernel too (no launch of its own).
void run_rope_attention(CudaDevice &dev, const minfer_node &rope_a, const minfer_node &rope_b, const minfer_node &attn,
                        const minfer_step_args &args, const minfer_node *norm_a = nullptr, const minfer_node *norm_b = nullptr);

// The op families, one file each.
std::span<const CudaOp> elementwise_ops();
std::span<const CudaOp> quant_ops();
std::span<const CudaOp> model_ops();
std::span<const CudaOp> moe_ops();

}  // namespace minfer::cuda
