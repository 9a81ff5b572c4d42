// core/models/moe.hpp — the mixture-of-experts FFN every MoE architecture shares.
#pragma once

#include <string>

#include "models/model.hpp"
#include "models/weights.hpp"

namespace minfer::models {

// The routed-expert FFN of layer prefix p ("blk.3.") on its normed input h [n_embd, T]:
//   logits = ffn_gate_inp h; ids = the expert_used_count largest; w = their softmax
//   probabilities (renormalised over the chosen ones where hp.expert_weights_norm);
//   out = sum_j w_j down_ids[j](silu(gate_ids[j] h) * up_ids[j] h)        -> [n_embd, T]
// The expert nodes are named p + "ffn_{gate,up,glu,down,sum}_exps" (the matmuls like their
// tensors), so one placement rule (blk.*.ffn_*_exps, 'placement: {experts: NAME}') moves the
// experts, their weights and their activation and sum together: the router stays put, and
// only h, the ids and weights go over and the [n_embd, T] sum comes back.
TensorId build_moe_ffn(GraphBuilder &gb, WeightReader &w, const std::string &p, TensorId h, const Hparams &hp);

}  // namespace minfer::models
