// plugins/cpu/ops_quant.cpp — embedding gather (any table dtype) and dequantize to f16.
#include <cstring>

#include "cpu_backend.hpp"
#include "decode_row.hpp"
#include "minfer/decode.hpp"

namespace minfer::cpu {
namespace {

std::string any(const minfer_node &) { return ""; }

// out[r] = table[ids[r]]; ids are checked against the table: a bad id is the caller's error.
void run_get_rows(const minfer_node &n, const RunCtx &ctx) {
  const minfer_tensor &table = *n.inputs[0];
  const int32_t *ids = ptr<int32_t>(*n.inputs[1]);
  float *y = ptr<float>(*n.output);
  const int64_t d = table.shape[0], rows = sdk::run_extent(table, 1, ctx.args), count = sdk::run_extent(*n.inputs[1], 0, ctx.args);
  const int64_t rb = sdk::row_bytes(table.dtype, d);
  const uint8_t *base = ptr(table);
  for (int64_t r = 0; r < count; ++r) {
    if (ids[r] < 0 || ids[r] >= rows)
      throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT,
                       "row id " + std::to_string(ids[r]) + " at position " + std::to_string(r) +
                           " is outside table " + sdk::describe(table));
    decode_row_f32(table.dtype, base + int64_t(ids[r]) * rb, y + r * d, d);
  }
}

void run_dequantize(const minfer_node &n, const RunCtx &ctx) {
  const minfer_tensor &x = *n.inputs[0];
  uint16_t *y = ptr<uint16_t>(*n.output);
  const uint8_t *src = ptr(x);
  sdk::visit_block_dtype(x.dtype, [&](auto tag) {
    using Block = typename decltype(tag)::type;
    const auto *blocks = reinterpret_cast<const Block *>(src);
    const int64_t per = minfer_dtype_info(x.dtype).block_values;
    const int64_t n_blocks = sdk::run_elements(x, ctx.args) / per;
    for (int64_t b = 0; b < n_blocks; ++b)
      sdk::decode_block(blocks[b], [&](int i, float v) { y[b * per + i] = sdk::float_to_half(v); });
  });
}

std::string known_block(const minfer_node &n) {
  const int32_t dt = n.inputs[0]->dtype;
  if (dt == MINFER_DTYPE_F32 || dt == MINFER_DTYPE_F16 || dt == MINFER_DTYPE_BF16) return "";
  if (sdk::visit_block_dtype(dt, [](auto) {})) return "";
  return std::string("no decoder for ") + minfer_dtype_name(dt);
}

const CpuOp kOps[] = {
    {MINFER_OP_GET_ROWS, known_block, run_get_rows},
    {MINFER_OP_DEQUANTIZE, known_block, run_dequantize},
};

}  // namespace

std::span<const CpuOp> quant_ops() { return kOps; }

}  // namespace minfer::cpu
