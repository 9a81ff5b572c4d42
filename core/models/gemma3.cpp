// core/models/gemma3.cpp — Gemma 3 (text): Gemma 2's layer without the attention soft-cap,
// with per-head RMS norms of q and k before RoPE, and a sliding-window pattern of
// sliding_window_pattern - 1 local layers then one global layer (default 6). The local layers
// rotate with rope.freq_base_swa (default 10000) unscaled; the global ones with rope.freq_base
// and the file's RoPE scaling. No final soft-cap unless the file gives one.
#include <cmath>

#include "common/error.hpp"
#include "models/model.hpp"

namespace minfer::models {

Hparams read_gemma3(const gguf::File &f) {
  Hparams hp = read_common_hparams(f, "gemma3");
  hp.rope_mode = MINFER_ROPE_NEOX;
  hp.embd_scale = std::sqrt(float(hp.n_embd));
  hp.post_norms = true;
  hp.gelu_ffn = true;
  hp.qk_norm = true;
  hp.final_softcap = f.get_or<float>("gemma3.final_logit_softcapping", 0.0f);
  if (!f.find("gemma3.attention.sliding_window"))
    throw Error(f.path() + ": missing gemma3.attention.sliding_window (the local layers' window; every Gemma 3 file has it)");
  hp.n_swa = f.get_int("gemma3.attention.sliding_window");
  hp.swa_layers = read_swa_layers(f, hp, 6);
  hp.rope_theta_swa = f.get_or<float>("gemma3.rope.freq_base_swa", 10000.0f);
  hp.rope_freq_scale_swa = 1.0f;
  // Gemma-3-27B (62 layers) scales q by 1/sqrt(n_embd / n_head), the others by 1/sqrt(head_dim).
  hp.attn_scale = 1.0f / std::sqrt(float(hp.n_layer == 62 ? hp.n_embd / hp.n_head : hp.head_dim));
  if (hp.n_swa <= 0) throw Error(f.path() + ": gemma3.attention.sliding_window is " + std::to_string(hp.n_swa) + "; it must be positive");
  if (!(hp.rope_theta_swa > 0) || !std::isfinite(hp.rope_theta_swa))
    throw Error(f.path() + ": gemma3.rope.freq_base_swa must be a positive number");
  if (!(hp.final_softcap >= 0) || !std::isfinite(hp.final_softcap))
    throw Error(f.path() + ": gemma3.final_logit_softcapping must be 0 (none) or positive");
  return hp;
}

}  // namespace minfer::models
