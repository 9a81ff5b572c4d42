// minfer/op_contract.hpp — what every op requires of its tensors, whatever the backend.
//
// One source of truth: the core's graph builder checks new nodes with it, and plugins check
// nodes with it in supports() before their own capability checks. A backend adds only what
// it cannot do (a dtype it lacks), never a different reading of the op.
#pragma once

#include <cmath>
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

// The node's params as the op's struct (the contract has checked the size).
template <class P>
const P &params_of(const minfer_node &n) {
  return *reinterpret_cast<const P *>(n.params);
}

// The values an RMS_NORM normalizes together: the params' group (ABI 1.4) or the whole row.
inline int64_t rms_norm_group(const minfer_node &n) {
  const auto &p = params_of<minfer_rms_norm_params>(n);
  if (p.struct_size >= MINFER_SIZE_UP_TO(minfer_rms_norm_params, group) && p.group > 0) return p.group;
  return n.inputs[0]->shape[0];
}

// Attention's ABI 1.6 fields: the score cap and the sliding window (0 = none), 0 where the
// writer's struct does not reach them.
inline float attention_softcap(const minfer_attention_params &p) {
  return p.struct_size >= MINFER_SIZE_UP_TO(minfer_attention_params, softcap) ? p.softcap : 0.0f;
}
inline int32_t attention_window(const minfer_attention_params &p) {
  return p.struct_size >= MINFER_SIZE_UP_TO(minfer_attention_params, window) ? p.window : 0;
}

// RoPE's scale of the rotated values (ABI 1.6): 1 where the writer's struct does not reach it or it is 0.
inline float rope_attn_factor(const minfer_rope_params &p) {
  return p.struct_size >= MINFER_SIZE_UP_TO(minfer_rope_params, attn_factor) && p.attn_factor != 0.0f ? p.attn_factor : 1.0f;
}

// The plugin ABI minor a node needs beyond 1.0, and what needs it (a plugin of an older minor
// would read it wrongly: the host does not give it such nodes).
struct AbiNeed {
  uint32_t minor = 0;
  const char *what = "";
};
inline AbiNeed abi_needed(const minfer_node &n) {
  for (int i = 0; i <= n.n_inputs; ++i) {  // the non-linear 4-bit types (1.11): an older plugin knows no such ids
    const minfer_tensor *t = i < n.n_inputs ? (n.inputs ? n.inputs[i] : nullptr) : n.output;
    if (t && (t->dtype == MINFER_DTYPE_IQ4_NL || t->dtype == MINFER_DTYPE_IQ4_XS))
      return {11, t->dtype == MINFER_DTYPE_IQ4_NL ? "an iq4_nl tensor" : "an iq4_xs tensor"};
  }
  if (n.op == MINFER_OP_TOP_K) return {7, "top_k"};
  if (n.op == MINFER_OP_MOE_WEIGHTS) return {7, "moe_weights"};
  if (n.op == MINFER_OP_MATMUL_ID) return {7, "matmul_id"};
  if (n.op == MINFER_OP_MOE_SUM) return {7, "moe_sum"};
  if (n.op == MINFER_OP_GEGLU) return {6, "geglu"};
  if (n.op == MINFER_OP_SCALE) return {6, "scale"};
  if (n.op == MINFER_OP_ATTENTION && n.params) {
    const auto &p = params_of<minfer_attention_params>(n);
    if (attention_softcap(p) != 0.0f) return {6, "attention with soft-capped scores"};
    if (attention_window(p) != 0) return {6, "sliding-window attention"};
  }
  if (n.op == MINFER_OP_ATTENTION) return {5, "paged attention"};
  if (n.op == MINFER_OP_ROPE && n.params && rope_attn_factor(params_of<minfer_rope_params>(n)) != 1.0f) return {6, "RoPE with an attention factor"};
  if (n.op == MINFER_OP_ARGMAX) return {5, "argmax"};
  for (int i = 0; i <= n.n_inputs; ++i) {
    const minfer_tensor *t = i < n.n_inputs ? (n.inputs ? n.inputs[i] : nullptr) : n.output;
    if (t && t->struct_size >= MINFER_SIZE_UP_TO(minfer_tensor, flags) && (t->flags & MINFER_TENSOR_OUTPUT_ROWS))
      return {5, "a tensor of the step's output rows"};
  }
  if (n.op == MINFER_OP_RMS_NORM && n.params && n.n_inputs > 0 && rms_norm_group(n) != n.inputs[0]->shape[0]) return {4, "a grouped RMS norm"};
  if (n.op == MINFER_OP_ROPE && n.n_inputs == 3) return {4, "RoPE frequency factors"};
  return {};
}

// "" when the node is a valid instance of its op; otherwise the reason, naming the tensor.
inline std::string check_op_contract(const minfer_node &n) {
  using detail::need;
  using detail::same_shape;
  const minfer_op_traits op = minfer_op_info(n.op);
  if (!op.name) return "unknown op id " + std::to_string(n.op);
  const bool rope_factors = n.op == MINFER_OP_ROPE && n.n_inputs == 3;  // ABI 1.4: frequency factors
  if (n.n_inputs != op.n_inputs && !rope_factors)
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
    case MINFER_OP_ALL_REDUCE:
      if (in_(0).dtype != MINFER_DTYPE_F32) return need(in_(0), "f32");
      break;
    case MINFER_OP_SCALE: {
      const auto &p = params_of<minfer_scale_params>(n);
      if (in_(0).dtype != MINFER_DTYPE_F32) return need(in_(0), "f32");
      if (!std::isfinite(p.scale)) return "scale must be a finite number";
      if (!(p.softcap >= 0) || !std::isfinite(p.softcap)) return "softcap must be 0 (none) or a positive number";
      break;
    }
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
                            table.dtype == MINFER_DTYPE_BF16 || minfer_dtype_info(table.dtype).is_quantized;
      if (!table_ok) return need(table, "f32, f16, bf16 or a block type");
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
    case MINFER_OP_SWIGLU:
    case MINFER_OP_GEGLU:
      for (int i = 0; i < 2; ++i)
        if (in_(i).dtype != MINFER_DTYPE_F32) return need(in_(i), "f32");
      if (!same_shape(in_(0), in_(1))) return "inputs " + describe(in_(0)) + " and " + describe(in_(1)) + " differ in shape";
      break;
    case MINFER_OP_RMS_NORM: {
      if (in_(0).dtype != MINFER_DTYPE_F32) return need(in_(0), "f32");
      const int64_t group = rms_norm_group(n);
      if (group <= 0 || in_(0).shape[0] % group != 0)
        return "group " + std::to_string(group) + " does not divide the rows of " + describe(in_(0));
      if (in_(1).dtype != MINFER_DTYPE_F32 || n_elements(in_(1)) != group)
        return need(in_(1), ("f32 with " + std::to_string(group) + " values (one per column of a group)").c_str());
      if (!(params_of<minfer_rms_norm_params>(n).eps > 0)) return "eps must be positive";
      break;
    }
    case MINFER_OP_MATMUL: {
      const minfer_tensor &w = in_(0), &x = in_(1);
      const minfer_dtype_traits wt = minfer_dtype_info(w.dtype);
      if (!(w.dtype == MINFER_DTYPE_F32 || w.dtype == MINFER_DTYPE_F16 || w.dtype == MINFER_DTYPE_BF16 || wt.is_quantized))
        return need(w, "f32, f16, bf16 or a block type");
      if (w.rank != 2) return need(w, "2-D [in, out]");
      if (x.dtype != MINFER_DTYPE_F32 || x.rank > 2 || x.shape[0] != w.shape[0])
        return need(x, ("f32 [" + std::to_string(w.shape[0]) + ", n]").c_str());
      if (out.dtype != MINFER_DTYPE_F32 || out.shape[0] != w.shape[1] || n_rows(out) != n_rows(x))
        return need(out, ("f32 [" + std::to_string(w.shape[1]) + ", " + std::to_string(n_rows(x)) + "]").c_str());
      return "";
    }
    case MINFER_OP_ROPE: {
      const auto &p = params_of<minfer_rope_params>(n);
      const minfer_tensor &x = in_(0), &pos = in_(1);
      if (x.dtype != MINFER_DTYPE_F32 || x.rank > 2) return need(x, "f32 [heads * head_dim, n]");
      if (p.head_dim <= 0 || x.shape[0] % p.head_dim != 0) return "head_dim " + std::to_string(p.head_dim) + " does not divide " + describe(x);
      if (p.n_dims <= 0 || p.n_dims > p.head_dim || p.n_dims % 2) return "n_dims must be even and within head_dim";
      if (p.mode != MINFER_ROPE_NORMAL && p.mode != MINFER_ROPE_NEOX) return "unknown rope mode " + std::to_string(p.mode);
      if (!(rope_attn_factor(p) > 0) || !std::isfinite(rope_attn_factor(p))) return "attn_factor must be 0 (none) or a positive number";
      if (pos.dtype != MINFER_DTYPE_I32 || pos.rank != 1 || pos.shape[0] != x.shape[1])
        return need(pos, ("i32 [" + std::to_string(x.shape[1]) + "]").c_str());
      if (n.n_inputs == 3 && (in_(2).dtype != MINFER_DTYPE_F32 || n_elements(in_(2)) != p.n_dims / 2))
        return need(in_(2), ("f32 [" + std::to_string(p.n_dims / 2) + "] (a frequency factor per rotated pair)").c_str());
      break;
    }
    case MINFER_OP_ARGMAX: {
      const minfer_tensor &x = in_(0);
      if (x.dtype != MINFER_DTYPE_F32 || x.rank != 2) return need(x, "f32 [d, rows]");
      if (out.dtype != MINFER_DTYPE_I32 || out.rank != 1 || out.shape[0] != x.shape[1])
        return need(out, ("i32 [" + std::to_string(x.shape[1]) + "]").c_str());
      return "";
    }
    case MINFER_OP_TOP_K: {
      const minfer_tensor &x = in_(0);
      const int32_t k = params_of<minfer_top_k_params>(n).k;
      if (x.dtype != MINFER_DTYPE_F32 || x.rank != 2) return need(x, "f32 [n, rows]");
      if (k < 1 || k > x.shape[0]) return "k " + std::to_string(k) + " must be from 1 to the row length " + std::to_string(x.shape[0]);
      if (out.dtype != MINFER_DTYPE_I32 || out.rank != 2 || out.shape[0] != k || out.shape[1] != x.shape[1])
        return need(out, ("i32 [" + std::to_string(k) + ", " + std::to_string(x.shape[1]) + "]").c_str());
      return "";
    }
    case MINFER_OP_MOE_WEIGHTS: {
      const auto &p = params_of<minfer_moe_weights_params>(n);
      const minfer_tensor &logits = in_(0), &ids = in_(1);
      if (p.gating != MINFER_MOE_GATING_SOFTMAX) return "unknown gating " + std::to_string(p.gating) + " (known: 0 softmax)";
      if (p.normalize != 0 && p.normalize != 1) return "normalize must be 0 or 1";
      if (!std::isfinite(p.scale)) return "scale must be a finite number";
      if (logits.dtype != MINFER_DTYPE_F32 || logits.rank != 2) return need(logits, "f32 [n_expert, rows]");
      if (ids.dtype != MINFER_DTYPE_I32 || ids.rank != 2 || ids.shape[1] != logits.shape[1] || ids.shape[0] > logits.shape[0])
        return need(ids, ("i32 [k <= " + std::to_string(logits.shape[0]) + ", " + std::to_string(logits.shape[1]) + "]").c_str());
      if (out.dtype != MINFER_DTYPE_F32 || !same_shape(out, ids)) return need(out, "f32 shaped like ids");
      return "";
    }
    case MINFER_OP_MATMUL_ID: {
      const minfer_tensor &w = in_(0), &x = in_(1), &ids = in_(2);
      const minfer_dtype_traits wt = minfer_dtype_info(w.dtype);
      if (!(w.dtype == MINFER_DTYPE_F32 || w.dtype == MINFER_DTYPE_F16 || w.dtype == MINFER_DTYPE_BF16 || wt.is_quantized))
        return need(w, "f32, f16, bf16 or a block type");
      if (w.rank != 3) return need(w, "3-D [in, out, n_expert]");
      if (ids.dtype != MINFER_DTYPE_I32 || ids.rank != 2) return need(ids, "i32 [k, rows]");
      const int64_t k = ids.shape[0], rows = ids.shape[1];
      const bool per_row = x.rank <= 2 && n_rows(x) == rows, per_pair = x.rank == 3 && x.shape[1] == k && x.shape[2] == rows;
      if (x.dtype != MINFER_DTYPE_F32 || x.shape[0] != w.shape[0] || !(per_row || per_pair))
        return need(x, ("f32 [" + std::to_string(w.shape[0]) + ", " + std::to_string(rows) + "] or [" + std::to_string(w.shape[0]) + ", " +
                        std::to_string(k) + ", " + std::to_string(rows) + "]").c_str());
      if (out.dtype != MINFER_DTYPE_F32 || out.rank != 3 || out.shape[0] != w.shape[1] || out.shape[1] != k || out.shape[2] != rows)
        return need(out, ("f32 [" + std::to_string(w.shape[1]) + ", " + std::to_string(k) + ", " + std::to_string(rows) + "]").c_str());
      if ((ids.token_dim >= 0) != (out.token_dim >= 0) || (ids.token_dim >= 0 && (ids.token_dim != 1 || out.token_dim != 2)))
        return need(ids, "following the step's tokens in its dim 1 exactly when the output does in its dim 2");
      return "";
    }
    case MINFER_OP_MOE_SUM: {
      const minfer_tensor &y = in_(0), &wts = in_(1);
      if (y.dtype != MINFER_DTYPE_F32 || y.rank != 3) return need(y, "f32 [d, k, rows]");
      if (wts.dtype != MINFER_DTYPE_F32 || wts.rank != 2 || wts.shape[0] != y.shape[1] || wts.shape[1] != y.shape[2])
        return need(wts, ("f32 [" + std::to_string(y.shape[1]) + ", " + std::to_string(y.shape[2]) + "]").c_str());
      if (out.dtype != MINFER_DTYPE_F32 || out.rank != 2 || out.shape[0] != y.shape[0] || out.shape[1] != y.shape[2])
        return need(out, ("f32 [" + std::to_string(y.shape[0]) + ", " + std::to_string(y.shape[2]) + "]").c_str());
      return "";
    }
    case MINFER_OP_ATTENTION: {
      const auto &p = params_of<minfer_attention_params>(n);
      if (p.head_dim <= 0 || p.n_head <= 0 || p.n_kv_head <= 0 || p.n_head % p.n_kv_head)
        return "heads: n_head must be a positive multiple of n_kv_head";
      const int64_t qd = int64_t(p.n_head) * p.head_dim, kvd = int64_t(p.n_kv_head) * p.head_dim;
      if (p.struct_size < MINFER_SIZE_UP_TO(minfer_attention_params, page_size) || p.page_size <= 0 || (p.page_size & (p.page_size - 1)))
        return "page_size must be a power of two (ABI 1.5 params)";
      if (!(attention_softcap(p) >= 0) || !std::isfinite(attention_softcap(p))) return "softcap must be 0 (none) or a positive number";
      if (attention_window(p) < 0) return "window must be 0 (every earlier position) or a positive count of positions";
      const minfer_tensor &q = in_(0), &k = in_(1), &v = in_(2), &kc = in_(3), &vc = in_(4), &pos = in_(5), &slot = in_(6), &table = in_(7);
      if (q.dtype != MINFER_DTYPE_F32 || q.rank != 2 || q.shape[0] != qd) return need(q, ("f32 [" + std::to_string(qd) + ", n]").c_str());
      for (const minfer_tensor *t : {&k, &v})
        if (t->dtype != MINFER_DTYPE_F32 || t->rank != 2 || t->shape[0] != kvd || t->shape[1] != q.shape[1])
          return need(*t, ("f32 [" + std::to_string(kvd) + ", " + std::to_string(q.shape[1]) + "]").c_str());
      for (const minfer_tensor *t : {&kc, &vc})
        if ((t->dtype != MINFER_DTYPE_F16 && t->dtype != MINFER_DTYPE_F32) || t->rank != 2 || t->shape[0] != kvd || t->dtype != kc.dtype ||
            t->shape[1] != kc.shape[1] || t->shape[1] % p.page_size)
          return need(*t, ("f16 or f32 [" + std::to_string(kvd) + ", n_pages * " + std::to_string(p.page_size) + "], both caches alike").c_str());
      for (const minfer_tensor *t : {&pos, &slot})
        if (t->dtype != MINFER_DTYPE_I32 || t->rank != 1 || t->shape[0] != q.shape[1] || (t->token_dim >= 0) != (q.token_dim >= 0))
          return need(*t, ("i32 [" + std::to_string(q.shape[1]) + "] following the step's tokens like q").c_str());
      if (table.dtype != MINFER_DTYPE_I32 || table.rank != 2 || table.token_dim != -1) return need(table, "i32 [max_pages, n_slots]");
      if (out.dtype != MINFER_DTYPE_F32 || !same_shape(out, q)) return need(out, "f32 shaped like q");
      return "";
    }
    default:
      return std::string("op ") + op.name + " has no contract";
  }
  // The f32 elementwise family: the output is f32 with the first input's shape.
  if (out.dtype != MINFER_DTYPE_F32) return need(out, "f32");
  if (!same_shape(in_(0), out)) return "output " + describe(out) + " must have the input's shape";
  return "";
}

}  // namespace minfer::sdk
