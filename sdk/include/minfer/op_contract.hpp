// minfer/op_contract.hpp — what every op requires of its tensors, whatever the backend.
//
// One source of truth: the core's graph builder checks new nodes with it, and plugins check
// nodes with it in supports() before their own capability checks. A backend adds only what
// it cannot do (a dtype it lacks), never a different reading of the op.
#pragma once

#include <string>

#include "minfer/abi.h"
#include "minfer/tensor.hpp"

namespace minfer::sdk {

namespace detail {

inline bool same_shape(const minfer_tensor &a, const minfer_tensor &b) {
  for (int d = 0; d < 4; ++d)
    if ((d < a.rank ? a.shape[d] : 1) != (d < b.rank ? b.shape[d] : 1)) return false;
  return true;
}

inline std::string need(const minfer_tensor &t, const char *what) {
  return "tensor " + describe(t) + " must be " + what;
}

}  // namespace detail

// "" when the node is a valid instance of its op; otherwise the reason, naming the tensor.
inline std::string check_op_contract(const minfer_node &n) {
  using detail::need;
  using detail::same_shape;
  const minfer_op_traits op = minfer_op_info(n.op);
  if (!op.name) return "unknown op id " + std::to_string(n.op);
  if (n.n_inputs != op.n_inputs)
    return std::string("op ") + op.name + " takes " + std::to_string(op.n_inputs) + " inputs, got " +
           std::to_string(n.n_inputs);
  if (op.params_size == 0 && n.params) return std::string("op ") + op.name + " takes no params";
  if (op.params_size && (!n.params || n.params->struct_size < op.params_size))
    return std::string("op ") + op.name + " needs its params struct";
  for (int i = 0; i < n.n_inputs; ++i)
    if (!is_contiguous(*n.inputs[i])) return need(*n.inputs[i], "contiguous with whole blocks per row");
  if (!is_contiguous(*n.output)) return need(*n.output, "contiguous with whole blocks per row");

  const minfer_tensor *const *inp = n.inputs;
  const minfer_tensor &out = *n.output;
  auto in_ = [&](int i) -> const minfer_tensor & { return *inp[i]; };
  switch (n.op) {
    case MINFER_OP_ADD:
    case MINFER_OP_MUL:
      for (int i = 0; i < 2; ++i)
        if (in_(i).dtype != MINFER_DTYPE_F32) return need(in_(i), "f32");
      if (!same_shape(in_(0), in_(1))) return "inputs " + describe(in_(0)) + " and " + describe(in_(1)) + " differ in shape";
      break;
    case MINFER_OP_SILU:
      if (in_(0).dtype != MINFER_DTYPE_F32) return need(in_(0), "f32");
      break;
    case MINFER_OP_ADD_ROW_BROADCAST:
      if (in_(0).dtype != MINFER_DTYPE_F32) return need(in_(0), "f32");
      if (in_(1).dtype != MINFER_DTYPE_F32) return need(in_(1), "f32");
      if (n_elements(in_(1)) != in_(0).shape[0])
        return "bias " + describe(in_(1)) + " must hold one value per column of " + describe(in_(0));
      break;
    case MINFER_OP_CONVERT:
      if (in_(0).dtype != MINFER_DTYPE_F32) return need(in_(0), "f32");
      if (out.dtype != MINFER_DTYPE_F16) return need(out, "f16 (only f32 -> f16 exists)");
      if (!same_shape(in_(0), out)) return "output " + describe(out) + " must have the input's shape";
      return "";
    case MINFER_OP_GET_ROWS: {
      const minfer_tensor &table = in_(0), &ids = in_(1);
      const bool table_ok = table.dtype == MINFER_DTYPE_F32 || table.dtype == MINFER_DTYPE_F16 ||
                            minfer_dtype_info(table.dtype).is_quantized;
      if (!table_ok) return need(table, "f32, f16 or a block type");
      if (table.rank != 2) return need(table, "2-D [row length, rows]");
      if (ids.dtype != MINFER_DTYPE_I32 || ids.rank != 1) return need(ids, "1-D i32");
      if (out.dtype != MINFER_DTYPE_F32 || out.rank != 2 || out.shape[0] != table.shape[0] ||
          out.shape[1] != ids.shape[0])
        return need(out, ("f32[" + std::to_string(table.shape[0]) + ", " + std::to_string(ids.shape[0]) + "]").c_str());
      return "";
    }
    case MINFER_OP_DEQUANTIZE:
      if (!minfer_dtype_info(in_(0).dtype).is_quantized) return need(in_(0), "a block type");
      if (out.dtype != MINFER_DTYPE_F16) return need(out, "f16");
      if (!same_shape(in_(0), out)) return "output " + describe(out) + " must have the input's shape";
      return "";
    default:
      return std::string("op ") + op.name + " has no contract";
  }
  // The f32 elementwise family: the output is f32 with the first input's shape.
  if (out.dtype != MINFER_DTYPE_F32) return need(out, "f32");
  if (!same_shape(in_(0), out)) return "output " + describe(out) + " must have the input's shape";
  return "";
}

}  // namespace minfer::sdk
