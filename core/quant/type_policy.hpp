// core/quant/type_policy.hpp — which type each tensor of a model gets when quantizing.
//
// One place decides it, for `minfer-gguf quantize` and `synth` alike. The rules follow what
// GGUF users expect from llama.cpp's file types: 1-D tensors (norms, biases) stay f32; the
// output projection (or the token embedding when it doubles as output) gets Q6_K, or Q8_0
// when its rows do not fill 256-value blocks; `_m` mixes give attn_v and ffn_down Q6_K in
// the first and last eighths of the layers and every third layer between.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace minfer::quant {

struct FileType {
  std::string name;      // "q4_0", "q4_k_m", "f16", ...
  int32_t base;          // the type most matrices get
  bool medium_mix;       // the _m rules above
  uint32_t gguf_ftype;   // general.file_type (llama.cpp's numbering)
};

// Parses a type name; throws minfer::Error listing the accepted names.
FileType parse_file_type(const std::string &name);
std::string file_type_names();  // "f32, f16, bf16, q4_0, ..., q4_k_m, q5_k_m"

struct TypeChoice {
  int32_t dtype;
  std::string note;  // non-empty when a fallback was taken: what and why
};

// The type for tensor `name` of shape (innermost first) in a model of n_layers layers.
// has_output: the model has its own output.weight (else token_embd is the output too).
TypeChoice choose_type(const FileType &ft, const std::string &name, const std::vector<int64_t> &shape,
                       int32_t source_dtype, int n_layers, bool has_output);

}  // namespace minfer::quant
