#include "quant/type_policy.hpp"

#include <regex>

#include "common/error.hpp"
#include "minfer/dtype.h"

namespace minfer::quant {
namespace {

const FileType kTypes[] = {
    {"f32", MINFER_DTYPE_F32, false, 0},   {"f16", MINFER_DTYPE_F16, false, 1},
    {"bf16", MINFER_DTYPE_BF16, false, 32}, {"q4_0", MINFER_DTYPE_Q4_0, false, 2},
    {"q4_1", MINFER_DTYPE_Q4_1, false, 3},  {"q5_0", MINFER_DTYPE_Q5_0, false, 8},
    {"q5_1", MINFER_DTYPE_Q5_1, false, 9},  {"q8_0", MINFER_DTYPE_Q8_0, false, 7},
    {"q2_k", MINFER_DTYPE_Q2_K, false, 10}, {"q3_k", MINFER_DTYPE_Q3_K, false, 12},
    {"q4_k", MINFER_DTYPE_Q4_K, false, 14}, {"q5_k", MINFER_DTYPE_Q5_K, false, 16},
    {"q6_k", MINFER_DTYPE_Q6_K, false, 18}, {"q4_k_m", MINFER_DTYPE_Q4_K, true, 15},
    {"q5_k_m", MINFER_DTYPE_Q5_K, true, 17}, {"iq4_nl", MINFER_DTYPE_IQ4_NL, false, 25},
    {"iq4_xs", MINFER_DTYPE_IQ4_XS, false, 30},
};

// llama.cpp's "use more bits" layers: first and last eighth, and every third in between.
bool more_bits(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

// What a block type falls back to when a row does not fill its blocks.
int32_t fallback(int32_t t) {
  switch (t) {
    case MINFER_DTYPE_Q2_K: case MINFER_DTYPE_Q3_K: return MINFER_DTYPE_IQ4_NL;  // as llama-quantize
    case MINFER_DTYPE_Q4_K: return MINFER_DTYPE_Q5_0;
    case MINFER_DTYPE_Q5_K: return MINFER_DTYPE_Q5_1;
    case MINFER_DTYPE_Q6_K: return MINFER_DTYPE_Q8_0;
    case MINFER_DTYPE_IQ4_XS: return MINFER_DTYPE_IQ4_NL;  // as llama-quantize
    default: return MINFER_DTYPE_F16;
  }
}

}  // namespace

FileType parse_file_type(const std::string &name) {
  for (const auto &t : kTypes)
    if (t.name == name) return t;
  throw Error("unknown type '" + name + "'; expected one of: " + file_type_names());
}

std::string file_type_names() {
  std::string s;
  for (const auto &t : kTypes) s += (s.empty() ? "" : ", ") + t.name;
  return s;
}

TypeChoice choose_type(const FileType &ft, const std::string &name, const std::vector<int64_t> &shape,
                       int32_t source_dtype, int n_layers, bool has_output) {
  if (shape.size() < 2) return {MINFER_DTYPE_F32, ""};  // norms and biases: tiny and sensitive
  // Expert routers stay f32 (llama-quantize and convert_hf_to_gguf.py keep them so): small,
  // and a rounding there changes which experts run.
  if (name.find(".ffn_gate_inp.weight") != std::string::npos) return {MINFER_DTYPE_F32, ""};
  int32_t want = ft.base;
  const bool is_output = name == "output.weight" || (!has_output && name == "token_embd.weight");
  const bool plain_float = want == MINFER_DTYPE_F32 || want == MINFER_DTYPE_F16 || want == MINFER_DTYPE_BF16;
  if (is_output && !plain_float && want != MINFER_DTYPE_Q8_0) want = shape[0] % 256 == 0 ? MINFER_DTYPE_Q6_K : MINFER_DTYPE_Q8_0;
  if (ft.medium_mix) {
    static const std::regex layer_re(R"(blk\.(\d+)\.(attn_v|ffn_down|ffn_down_exps)\.weight)");
    std::smatch m;
    if (std::regex_match(name, m, layer_re) && more_bits(std::stoi(m[1]), n_layers)) want = MINFER_DTYPE_Q6_K;
  }
  std::string note;
  const int32_t first = want;
  while (shape[0] % minfer_dtype_info(want).block_values != 0) want = fallback(want);
  if (want == MINFER_DTYPE_F16 && (source_dtype == MINFER_DTYPE_F32 || source_dtype == MINFER_DTYPE_BF16) && first != MINFER_DTYPE_F16)
    want = source_dtype;  // keep the source's precision rather than lose it
  if (want != first)
    note = name + ": rows of " + std::to_string(shape[0]) + " values do not fill " + minfer_dtype_name(first) + " blocks of " +
           std::to_string(minfer_dtype_info(first).block_values) + "; using " + minfer_dtype_name(want);
  return {want, note};
}

}  // namespace minfer::quant
