// minfer/tensor.hpp — small C++ helpers over minfer_tensor for plugin authors.
#pragma once

#include <cstdint>
#include <string>

#include "minfer/abi.h"

namespace minfer::sdk {

inline int64_t n_elements(const minfer_tensor &t) {
  int64_t n = 1;
  for (int d = 0; d < t.rank; ++d) n *= t.shape[d];
  return n;
}

inline int64_t n_rows(const minfer_tensor &t) { return n_elements(t) / (t.shape[0] ? t.shape[0] : 1); }

// Bytes of one row (shape[0] values) of dtype; -1 if the row does not hold whole blocks.
inline int64_t row_bytes(int32_t dtype, int64_t row_len) {
  const minfer_dtype_traits tr = minfer_dtype_info(dtype);
  if (!tr.name || row_len % tr.block_values != 0) return -1;
  return row_len / tr.block_values * tr.block_bytes;
}

// Bytes of a contiguous tensor; -1 when its rows do not hold whole blocks.
inline int64_t n_bytes(const minfer_tensor &t) {
  const int64_t rb = row_bytes(t.dtype, t.shape[0]);
  return rb < 0 ? -1 : rb * n_rows(t);
}

// True when the tensor is densely packed, innermost dim first.
inline bool is_contiguous(const minfer_tensor &t) {
  const minfer_dtype_traits tr = minfer_dtype_info(t.dtype);
  if (!tr.name) return false;
  int64_t expect = row_bytes(t.dtype, t.shape[0]);
  if (expect < 0) return false;
  if (tr.block_values == 1 && t.stride_bytes[0] != tr.block_bytes) return false;
  for (int d = 1; d < t.rank; ++d) {
    if (t.shape[d] > 1 && t.stride_bytes[d] != expect) return false;
    expect *= t.shape[d];
  }
  return true;
}

// Extent of dim d in this step: the step's n_tokens for the tensor's token dim (when the step
// gives one), else the compiled shape.
inline int64_t step_outputs(const minfer_step_args &a) {
  return a.struct_size >= MINFER_SIZE_UP_TO(minfer_step_args, n_outputs) ? a.n_outputs : a.n_tokens;
}
// 1.9: every token's position is below it; 0 where the host did not say (an older host).
inline int64_t step_max_positions(const minfer_step_args &a) {
  return a.struct_size >= MINFER_SIZE_UP_TO(minfer_step_args, max_positions) && a.max_positions > 0 ? a.max_positions : 0;
}
inline int64_t step_seqs(const minfer_step_args &a) {
  return a.struct_size >= MINFER_SIZE_UP_TO(minfer_step_args, n_seqs) && a.n_seqs > 0 ? a.n_seqs : 1;
}
// A tensor's token dim follows the step's n_tokens, or (MINFER_TENSOR_OUTPUT_ROWS) its n_outputs.
inline int64_t run_extent(const minfer_tensor &t, int d, const minfer_step_args &a) {
  if (d != t.token_dim) return t.shape[d];
  const int64_t n = (t.flags & MINFER_TENSOR_OUTPUT_ROWS) ? step_outputs(a) : a.n_tokens;
  return n > 0 ? n : t.shape[d];
}
inline int64_t run_rows(const minfer_tensor &t, const minfer_step_args &a) {
  int64_t r = 1;
  for (int d = 1; d < t.rank; ++d) r *= run_extent(t, d, a);
  return r;
}
inline int64_t run_elements(const minfer_tensor &t, const minfer_step_args &a) { return t.shape[0] * run_rows(t, a); }

inline std::string shape_string(const minfer_tensor &t) {
  std::string s = "[";
  for (int d = 0; d < t.rank; ++d) s += (d ? ", " : "") + std::to_string(t.shape[d]);
  return s + "]";
}

// "name f32[64, 5]" for error messages.
inline std::string describe(const minfer_tensor &t) {
  return std::string(t.name ? t.name : "?") + " " + minfer_dtype_name(t.dtype) + shape_string(t);
}

}  // namespace minfer::sdk
