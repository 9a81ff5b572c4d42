// core/models/phi3.cpp — Phi-3 (and Phi-4-mini): LLaMA's layer with fused weights — Q, K and V
// as the row ranges of one attn_qkv, gate and up as the two halves of one ffn_up — and NeoX
// RoPE. Its attention.sliding_window key is ignored, as llama.cpp ignores it for phi3. Files
// with LongRoPE factors (rope_factors_long/short, the 128k-context variants) are refused
// until minfer runs them.
#include "common/error.hpp"
#include "models/model.hpp"

namespace minfer::models {

Hparams read_phi3(const gguf::File &f) {
  Hparams hp = read_common_hparams(f, "phi3");
  hp.rope_mode = MINFER_ROPE_NEOX;
  hp.fused_qkv = true;
  hp.fused_gate_up = true;
  for (const char *t : {"rope_factors_long.weight", "rope_factors_short.weight"})
    if (f.find_tensor(t))
      throw Error(f.path() + ": tensor '" + std::string(t) +
                  "': LongRoPE frequency factors (Phi-3 128k-context files) are not supported yet; a 4k-context Phi-3 file runs");
  return hp;
}

}  // namespace minfer::models
