// core/models/llama.cpp — LLaMA: the plain decoder transformer, rotary pairs (x[2i], x[2i+1]).
#include "models/model.hpp"

namespace minfer::models {

Hparams read_llama(const gguf::File &f) {
  Hparams hp = read_common_hparams(f, "llama");
  hp.rope_mode = MINFER_ROPE_NORMAL;
  return hp;
}

}  // namespace minfer::models
