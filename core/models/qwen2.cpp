// core/models/qwen2.cpp — Qwen2: LLaMA's layout plus Q/K/V biases, NeoX rotary halves.
#include "models/model.hpp"

namespace minfer::models {

Hparams read_qwen2(const gguf::File &f) {
  Hparams hp = read_common_hparams(f, "qwen2");
  hp.rope_mode = MINFER_ROPE_NEOX;
  hp.qkv_bias = true;
  return hp;
}

}  // namespace minfer::models
