// core/models/gemma2.cpp — Gemma 2: embeddings scaled by sqrt(n_embd), RMS norms after the
// attention and after the FFN (before each residual add), a GELU(tanh)-gated FFN, attention
// scores and final logits soft-capped (cap * tanh(x / cap)), sliding-window attention on
// every other layer (0, 2, 4, ...), NeoX RoPE, tied embeddings. Norm weights are used as
// stored (converters fold Gemma's "+1" in). Defaults for absent keys are llama.cpp's.
#include <cmath>

#include "common/error.hpp"
#include "models/model.hpp"

namespace minfer::models {

Hparams read_gemma2(const gguf::File &f) {
  Hparams hp = read_common_hparams(f, "gemma2");
  hp.rope_mode = MINFER_ROPE_NEOX;
  hp.embd_scale = std::sqrt(float(hp.n_embd));
  hp.post_norms = true;
  hp.gelu_ffn = true;
  hp.attn_softcap = f.get_or<float>("gemma2.attn_logit_softcapping", 50.0f);
  hp.final_softcap = f.get_or<float>("gemma2.final_logit_softcapping", 30.0f);
  hp.n_swa = f.find("gemma2.attention.sliding_window") ? f.get_int("gemma2.attention.sliding_window") : 4096;
  hp.swa_layers = read_swa_layers(f, hp, 2);
  hp.rope_theta_swa = hp.rope_theta;  // one RoPE for every layer
  hp.rope_freq_scale_swa = hp.rope_freq_scale;
  // Gemma-2-27B (46 layers) scales q by 1/sqrt(n_embd / n_head), the others by 1/sqrt(head_dim).
  hp.attn_scale = 1.0f / std::sqrt(float(hp.n_layer == 46 ? hp.n_embd / hp.n_head : hp.head_dim));
  for (const auto &[key, v] : {std::pair{"gemma2.attn_logit_softcapping", hp.attn_softcap}, {"gemma2.final_logit_softcapping", hp.final_softcap}})
    if (!(v >= 0) || !std::isfinite(v)) throw Error(f.path() + ": " + key + " is " + std::to_string(v) + "; it must be 0 (none) or positive");
  if (hp.n_swa <= 0) throw Error(f.path() + ": gemma2.attention.sliding_window is " + std::to_string(hp.n_swa) + "; it must be positive");
  return hp;
}

}  // namespace minfer::models
