#include "reference/ops.hpp"

#include <cmath>
#include <cstring>

#include "common/error.hpp"
#include "minfer/dtype.h"
#include "quant/reference.hpp"

namespace minfer::reference {
namespace {

int64_t count(const std::array<int64_t, 4> &s) { return s[0] * s[1] * s[2] * s[3]; }

const float *f32(const RefTensor &t) { return reinterpret_cast<const float *>(t.data); }

std::vector<uint8_t> f32_bytes(const std::vector<float> &v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<uint8_t> f16_bytes(const std::vector<float> &v) {
  std::vector<uint8_t> out(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = quant::f32_to_f16(v[i]);
    std::memcpy(&out[2 * i], &h, 2);
  }
  return out;
}

}  // namespace

std::vector<uint8_t> run_op(int32_t op, const std::vector<RefTensor> &in, int32_t out_dtype,
                            const std::array<int64_t, 4> &out_shape) {
  const int64_t n = count(out_shape);
  std::vector<float> y(static_cast<size_t>(n));
  switch (op) {
    case MINFER_OP_ADD:
      for (int64_t i = 0; i < n; ++i) y[i] = f32(in[0])[i] + f32(in[1])[i];
      return f32_bytes(y);
    case MINFER_OP_MUL:
      for (int64_t i = 0; i < n; ++i) y[i] = f32(in[0])[i] * f32(in[1])[i];
      return f32_bytes(y);
    case MINFER_OP_SILU:
      for (int64_t i = 0; i < n; ++i) {
        const double x = f32(in[0])[i];
        y[i] = float(x / (1.0 + std::exp(-x)));
      }
      return f32_bytes(y);
    case MINFER_OP_ADD_ROW_BROADCAST: {
      const int64_t d = out_shape[0];
      for (int64_t i = 0; i < n; ++i) y[i] = f32(in[0])[i] + f32(in[1])[i % d];
      return f32_bytes(y);
    }
    case MINFER_OP_CONVERT:
      if (out_dtype != MINFER_DTYPE_F16) break;
      for (int64_t i = 0; i < n; ++i) y[i] = f32(in[0])[i];
      return f16_bytes(y);
    case MINFER_OP_GET_ROWS: {
      const RefTensor &table = in[0];
      const auto *ids = reinterpret_cast<const int32_t *>(in[1].data);
      const int64_t d = table.shape[0], table_rows = table.shape[1];
      const uint64_t rb = dtype_bytes(table.dtype, d, "get_rows table row");
      for (int64_t r = 0; r < out_shape[1]; ++r) {
        if (ids[r] < 0 || ids[r] >= table_rows)
          throw Error("get_rows: id " + std::to_string(ids[r]) + " at position " +
                      std::to_string(r) + " is outside the table's " +
                      std::to_string(table_rows) + " rows");
        quant::dequantize_row(table.dtype, table.data + uint64_t(ids[r]) * rb, &y[size_t(r * d)], d);
      }
      return f32_bytes(y);
    }
    case MINFER_OP_DEQUANTIZE:
      quant::dequantize_row(in[0].dtype, in[0].data, y.data(), n);
      return f16_bytes(y);
    default:
      break;
  }
  throw Error(std::string("reference: no implementation of op ") + minfer_op_name(op) + " -> " +
              minfer_dtype_name(out_dtype));
}

std::map<std::string, std::vector<uint8_t>> evaluate(
    const Graph &g, const std::map<std::string, std::vector<uint8_t>> &inputs) {
  std::vector<std::vector<uint8_t>> values(g.tensors().size());
  for (size_t i = 0; i < g.tensors().size(); ++i) {
    const Tensor &t = g.tensors()[i];
    if (t.role == TensorRole::Weight) {
      values[i].assign(t.weight.data, t.weight.data + t.weight.size);
    } else if (t.role == TensorRole::Input) {
      auto it = inputs.find(t.name);
      if (it == inputs.end() || it->second.size() != t.n_bytes())
        throw Error("reference: input '" + t.name + "' missing or not " +
                    std::to_string(t.n_bytes()) + " bytes");
      values[i] = it->second;
    }
  }
  for (const Node &node : g.nodes()) {
    std::vector<RefTensor> in;
    for (TensorId id : node.inputs)
      in.push_back({g.tensor(id).dtype, g.tensor(id).shape, values[size_t(id)].data()});
    const Tensor &out = g.tensor(node.output);
    values[size_t(node.output)] = run_op(node.op, in, out.dtype, out.shape);
  }
  std::map<std::string, std::vector<uint8_t>> outputs;
  for (size_t i = 0; i < g.tensors().size(); ++i)
    if (g.tensors()[i].is_output) outputs[g.tensors()[i].name] = values[i];
  return outputs;
}

}  // namespace minfer::reference
