// plugins/cpu/ops_matmul.cpp — y[t] = W x[t] for weights of every type.
//
// Threads split the weight's output rows; each decodes a row to f32 once and dots it with
// every token's activations, so the weights are read once per call whatever the batch.
#include <vector>

#include "cpu_backend.hpp"
#include "decode_row.hpp"
#include "thread_pool.hpp"

namespace minfer::cpu {
namespace {

std::string weight_known(const minfer_node &n) {
  const int32_t dt = n.inputs[0]->dtype;
  if (dt == MINFER_DTYPE_F32 || dt == MINFER_DTYPE_F16 || dt == MINFER_DTYPE_BF16 || sdk::visit_block_dtype(dt, [](auto) {}))
    return "";
  return std::string("no decoder for ") + minfer_dtype_name(dt);
}

float dot(const float *a, const float *b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // eight lanes: the compiler vectorizes this
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void run_matmul(const minfer_node &n, const RunCtx &ctx) {
  const minfer_tensor &w = *n.inputs[0];
  const float *x = ptr<float>(*n.inputs[1]);
  float *y = ptr<float>(*n.output);
  const int64_t k = w.shape[0], m = w.shape[1], tokens = sdk::run_rows(*n.inputs[1], ctx.args);
  const int64_t rb = sdk::row_bytes(w.dtype, k);
  const uint8_t *wb = ptr(w);
  ctx.pool.run(m, [&](int64_t o0, int64_t o1, int) {
    std::vector<float> row(w.dtype == MINFER_DTYPE_F32 ? 0 : size_t(k));
    for (int64_t o = o0; o < o1; ++o) {
      const float *wr = reinterpret_cast<const float *>(wb + o * rb);
      if (w.dtype != MINFER_DTYPE_F32) {
        decode_row_f32(w.dtype, wb + o * rb, row.data(), k);
        wr = row.data();
      }
      for (int64_t t = 0; t < tokens; ++t) y[t * m + o] = dot(wr, x + t * k, k);
    }
  });
}

const CpuOp kOps[] = {
    {MINFER_OP_MATMUL, weight_known, run_matmul},
};

}  // namespace

std::span<const CpuOp> matmul_ops() { return kOps; }

}  // namespace minfer::cpu
