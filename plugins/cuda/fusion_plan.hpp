// plugins/cuda/fusion_plan.hpp — which nodes of a compiled CUDA segment run together as one
// step: a matmul with its bias or residual add in the epilogue, gate/up/SwiGLU, a pair of
// RoPEs (with the attention after them), matmuls sharing their input as one group, and RMS
// norms folded into the matmul steps that read them. Made once at compile from the nodes'
// tensors alone; the segment runs and explains the steps it describes.
#pragma once

#include <string>
#include <vector>

#include "minfer/plugin.hpp"
#include "ops/op_table.hpp"

namespace minfer::cuda {

struct FusionPlan {
  // Per node: the step it heads runs matmul+add, gate+up+glu, a rope pair (with its
  // attention); or a step before it already ran it (fused_away).
  // fuse_top_k_weights: a TOP_K and the MOE_WEIGHTS after it in one launch; fuse_sum_add: a
  // MOE_SUM and the residual ADD of its output; fuse_rope_norms: a rope pair whose inputs are
  // the two per-head RMS_NORMs right before it, run inside its launch; fuse_router (at an
  // RMS_NORM): the MoE router after it — its MATMUL, and TOP_K fused with MOE_WEIGHTS — in one
  // launch for a decode token, the norm's output still written for the experts;
  // fuse_expert_sum (at a MATMUL_ID): the MOE_SUM of its output after it, and that sum's
  // residual ADD where fuse_sum_add, in one launch for a decode token (larger steps run the
  // matmul, then the sum's step as planned without it).
  std::vector<bool> fuse_add, fuse_glu, fuse_rope, fuse_rope_attention, fuse_rope_norms, fuse_top_k_weights, fuse_sum_add, fuse_router,
      fuse_expert_sum, fused_away;
  // Per fuse_router norm: the last node of a routed FFN whose three steps (the router, the
  // gate/up/glu experts, the down experts with their sum and add) may run as one launch for a
  // decode token (moe_ffn_decode_kernel), or 0. Its nodes keep their steps for larger ones.
  std::vector<size_t> moe_ffn_last;
  // Per dense gate/up/glu step (its norm folded in): the last node of its FFN (the down matmul,
  // or that matmul's fused add) where the whole FFN may run as one launch for a decode token
  // (ffn_decode_kernel), or 0.
  std::vector<size_t> ffn_last;
  // Per attention output projection (a MATMUL with its residual add): the head of the
  // one-launch FFN that may run it as its first stage (moe_ffn_last's norm, or ffn_last's gate
  // step), or 0.
  std::vector<size_t> o_ffn;
  // Per step's first node: the most rows (tokens) a step may have for it to run fused; larger
  // steps run its nodes one by one (their tensors would overlap at that size).
  std::vector<int64_t> fused_up_to;
  std::vector<std::vector<MatmulStep>> group;  // at a group's first node: its steps
  std::vector<size_t> owner;                   // per node: the first node of the step that runs it
  std::vector<const minfer_node *> norm_of;    // per step's first node: the RMS norm it runs, or null

  // Node i as run_matmul_group takes it: with its fused add, if any.
  MatmulStep step_at(const std::vector<sdk::OwnedNode> &nodes, size_t i) const;
  // One line for the log: how many of each fusion ("" when there are none).
  std::string summary() const;
};

FusionPlan plan_fusions(const std::vector<sdk::OwnedNode> &nodes);

}  // namespace minfer::cuda
