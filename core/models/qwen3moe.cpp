// core/models/qwen3moe.cpp — Qwen3-MoE (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B): Qwen3's attention
// (per-head q/k norms, NeoX RoPE) with a routed-expert FFN in every layer, the experts
// expert_feed_forward_length wide, their chosen weights renormalised as llama.cpp does.
#include "common/error.hpp"
#include "models/model.hpp"

namespace minfer::models {

Hparams read_qwen3moe(const gguf::File &f) {
  Hparams hp = read_common_hparams(f, "qwen3moe");
  hp.rope_mode = MINFER_ROPE_NEOX;
  hp.qk_norm = true;
  if (hp.n_expert == 0) throw Error(f.path() + ": qwen3moe.expert_count is missing; a Qwen3-MoE file names its experts");
  return hp;
}

}  // namespace minfer::models
