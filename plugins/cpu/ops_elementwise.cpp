// plugins/cpu/ops_elementwise.cpp — f32 elementwise ops and f32 -> f16 conversion.
#include <cmath>

#include "cpu_backend.hpp"
#include "thread_pool.hpp"
#include "minfer/decode.hpp"
#include "minfer/op_contract.hpp"

namespace minfer::cpu {
namespace {

std::string any(const minfer_node &) { return ""; }

void run_add(const minfer_node &n, const RunCtx &ctx) {
  const float *a = ptr<float>(*n.inputs[0]), *b = ptr<float>(*n.inputs[1]);
  float *y = ptr<float>(*n.output);
  const int64_t count = sdk::run_elements(*n.output, ctx.args);
  for (int64_t i = 0; i < count; ++i) y[i] = a[i] + b[i];
}

void run_mul(const minfer_node &n, const RunCtx &ctx) {
  const float *a = ptr<float>(*n.inputs[0]), *b = ptr<float>(*n.inputs[1]);
  float *y = ptr<float>(*n.output);
  const int64_t count = sdk::run_elements(*n.output, ctx.args);
  for (int64_t i = 0; i < count; ++i) y[i] = a[i] * b[i];
}

// y = x / (1 + e^-x)
void run_silu(const minfer_node &n, const RunCtx &ctx) {
  const float *x = ptr<float>(*n.inputs[0]);
  float *y = ptr<float>(*n.output);
  const int64_t count = sdk::run_elements(*n.output, ctx.args);
  for (int64_t i = 0; i < count; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

// y[r][i] = a[r][i] + b[i]
void run_add_row_broadcast(const minfer_node &n, const RunCtx &ctx) {
  const float *a = ptr<float>(*n.inputs[0]), *b = ptr<float>(*n.inputs[1]);
  float *y = ptr<float>(*n.output);
  const int64_t d = n.output->shape[0], rows = sdk::run_rows(*n.output, ctx.args);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < d; ++i) y[r * d + i] = a[r * d + i] + b[i];
}

void run_convert(const minfer_node &n, const RunCtx &ctx) {
  const float *x = ptr<float>(*n.inputs[0]);
  uint16_t *y = ptr<uint16_t>(*n.output);
  const int64_t count = sdk::run_elements(*n.output, ctx.args);
  for (int64_t i = 0; i < count; ++i) y[i] = sdk::float_to_half(x[i]);
}

// y = scale * x, or softcap * tanh(scale * x / softcap): rows in parallel (a logits cap
// touches the whole vocabulary of every output row).
void run_scale(const minfer_node &n, const RunCtx &ctx) {
  const auto &p = sdk::params_of<minfer_scale_params>(n);
  const float *x = ptr<float>(*n.inputs[0]);
  float *y = ptr<float>(*n.output);
  ctx.pool.run(sdk::run_elements(*n.output, ctx.args), [&](int64_t i0, int64_t i1, int) {
    if (p.softcap > 0) {
      const float pre = p.scale / p.softcap;
      for (int64_t i = i0; i < i1; ++i) y[i] = p.softcap * std::tanh(pre * x[i]);
    } else {
      for (int64_t i = i0; i < i1; ++i) y[i] = p.scale * x[i];
    }
  });
}

// out[r] = the first index of row r's largest value (NaN never wins): rows in parallel.
void run_argmax(const minfer_node &n, const RunCtx &ctx) {
  const float *x = ptr<float>(*n.inputs[0]);
  int32_t *out = ptr<int32_t>(*n.output);
  const int64_t d = n.inputs[0]->shape[0], rows = sdk::run_rows(*n.inputs[0], ctx.args);
  ctx.pool.run(rows, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float *row = x + r * d;
      int64_t best = -1;
      for (int64_t i = 0; i < d; ++i)
        if (row[i] == row[i] && (best < 0 || row[i] > row[best])) best = i;  // row[i] == row[i]: not NaN
      out[r] = int32_t(best < 0 ? 0 : best);
    }
  });
}

const CpuOp kOps[] = {
    {MINFER_OP_ARGMAX, any, run_argmax},
    {MINFER_OP_SCALE, any, run_scale},
    {MINFER_OP_ADD, any, run_add},
    {MINFER_OP_MUL, any, run_mul},
    {MINFER_OP_SILU, any, run_silu},
    {MINFER_OP_ADD_ROW_BROADCAST, any, run_add_row_broadcast},
    {MINFER_OP_CONVERT, any, run_convert},
};

}  // namespace

std::span<const CpuOp> elementwise_ops() { return kOps; }

}  // namespace minfer::cpu
