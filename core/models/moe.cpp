// core/models/moe.cpp — the routed-expert FFN (llama.cpp's build_moe_ffn for softmax gating).
#include "models/moe.hpp"

namespace minfer::models {

TensorId build_moe_ffn(GraphBuilder &gb, WeightReader &w, const std::string &p, TensorId h, const Hparams &hp) {
  const int64_t d = hp.n_embd, ne = hp.n_expert, nf = hp.n_ff_exp;
  const std::string experts = std::to_string(ne) + " experts";
  const TensorId router = w.weight(p + "ffn_gate_inp.weight", {d, ne}, "expert router [n_embd, " + experts + "]");
  const TensorId logits = gb.matmul(p + "ffn_moe_logits", router, h);
  const TensorId ids = gb.top_k(p + "ffn_moe_topk", logits, int32_t(hp.n_expert_used));
  const TensorId weights = gb.moe_weights(p + "ffn_moe_weights", logits, ids, hp.expert_weights_norm, hp.expert_weights_scale);
  const std::string up_shape = "[n_embd, expert n_ff " + std::to_string(nf) + ", " + experts + "]";
  const TensorId g = gb.matmul_id(p + "ffn_gate_exps", w.weight(p + "ffn_gate_exps.weight", {d, nf, ne}, "expert gates " + up_shape), h, ids);
  const TensorId u = gb.matmul_id(p + "ffn_up_exps", w.weight(p + "ffn_up_exps.weight", {d, nf, ne}, "expert ups " + up_shape), h, ids);
  const TensorId s = gb.swiglu(p + "ffn_glu_exps", g, u);
  const TensorId down = gb.matmul_id(p + "ffn_down_exps",
                                     w.weight(p + "ffn_down_exps.weight", {nf, d, ne}, "expert downs [expert n_ff, n_embd, " + experts + "]"), s, ids);
  return gb.moe_sum(p + "ffn_sum_exps", down, weights);
}

}  // namespace minfer::models
