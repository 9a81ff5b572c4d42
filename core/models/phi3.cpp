// core/models/phi3.cpp — Phi-3 (and Phi-3.5, Phi-4, Phi-4-mini): LLaMA's layer with fused
// weights — Q, K and V as the row ranges of one attn_qkv, gate and up as the two halves of one
// ffn_up — and NeoX RoPE, partial where rope.dimension_count says (Phi-4-mini). Its
// attention.sliding_window key is ignored, as llama.cpp ignores it for phi3. LongRoPE files
// (rope_factors_long/short: the 128k-context ones) rotate with the long factors when the
// context is above rope.scaling.original_context_length, else the short ones, the rotated
// values scaled by rope.scaling.attn_factor, as llama.cpp does.
#include <cmath>

#include "common/error.hpp"
#include "models/model.hpp"

namespace minfer::models {

Hparams read_phi3(const gguf::File &f) {
  Hparams hp = read_common_hparams(f, "phi3");
  hp.rope_mode = MINFER_ROPE_NEOX;
  hp.fused_qkv = true;
  hp.fused_gate_up = true;
  const bool has_long = f.find_tensor("rope_factors_long.weight"), has_short = f.find_tensor("rope_factors_short.weight");
  if (has_long != has_short)
    throw Error(f.path() + ": the file has " + (has_long ? "rope_factors_long" : "rope_factors_short") + ".weight but not " +
                (has_long ? "rope_factors_short" : "rope_factors_long") + ".weight; LongRoPE needs both (the file is damaged)");
  if (!has_long) return hp;
  hp.longrope = true;
  if (!f.find("phi3.rope.scaling.original_context_length"))
    throw Error(f.path() + ": LongRoPE factors without phi3.rope.scaling.original_context_length (the context that picks long or short factors)");
  hp.n_ctx_orig = f.get_int("phi3.rope.scaling.original_context_length");
  hp.rope_attn_factor = f.get_or<float>("phi3.rope.scaling.attn_factor", 1.0f);
  if (hp.n_ctx_orig <= 0) throw Error(f.path() + ": phi3.rope.scaling.original_context_length must be positive");
  if (!(hp.rope_attn_factor > 0) || !std::isfinite(hp.rope_attn_factor))
    throw Error(f.path() + ": phi3.rope.scaling.attn_factor must be a positive number");
  return hp;
}

}  // namespace minfer::models
