// core/models/qwen3.cpp — Qwen3: Qwen2's layout without the Q/K/V biases, with a per-head RMS
// norm of q and k before RoPE (attn_q_norm, attn_k_norm) and heads of attention.key_length
// values (n_head * head_dim need not be n_embd).
#include "models/model.hpp"

namespace minfer::models {

Hparams read_qwen3(const gguf::File &f) {
  Hparams hp = read_common_hparams(f, "qwen3");
  hp.rope_mode = MINFER_ROPE_NEOX;
  hp.qk_norm = true;
  return hp;
}

}  // namespace minfer::models
