// plugins/cpu/ops_matmul.cpp — y[t] = W x[t] for weights of every type.
//
// Threads split the weight's output rows, so the weights are read once per call whatever the
// batch. With AMX, many tokens times block-quantized weights go to tile products
// (amx_matmul.hpp). Otherwise Q4_0/Q5_0/Q8_0/Q4_K/Q6_K weights take the integer path
// (qdot.hpp), four rows at a time where a kernel exists (Q4_0/Q8_0 with VNNI); other types
// decode each row to f32 once and dot it with every token's activations.
#include <algorithm>
#include <vector>

#include "amx_matmul.hpp"
#include "cpu_backend.hpp"
#include "decode_row.hpp"
#include "qdot.hpp"
#include "thread_pool.hpp"

namespace minfer::cpu {
namespace {

float dot(const float *a, const float *b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // eight lanes: the compiler vectorizes this
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Integer path: activations quantized to 8 bits once, then int8 dots per weight block.
void matmul_quantized(int32_t dtype, const uint8_t *wb, int64_t k, int64_t m, const float *x, int64_t tokens, float *y,
                      const RunCtx &ctx, QDotFn dot_q) {
  const QDot4Fn dot4 = qdot4_for(dtype, ctx.isa);  // four rows at once where there is a kernel
  const int64_t rb = sdk::row_bytes(dtype, k), kb = k / 32;
  thread_local std::vector<ActBlock> act;  // reused across calls: no allocation per token
  act.resize(size_t(tokens * kb));
  ActBlock *a = act.data();  // the workers must use this thread's buffer, not their own
  ctx.pool.run(tokens, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) quantize_activations(x + t * k, a + t * kb, k);
  });
  // Tokens in groups of kMaxTokens: each weight row stays in L1 across its group, and each
  // weight block is decoded once per group.
  ctx.pool.run(m, [&](int64_t o0, int64_t o1, int) {
    float out[kMaxTokens], out4[4 * kMaxTokens];
    for (int64_t t0 = 0; t0 < tokens; t0 += kMaxTokens) {
      const int nt = int(std::min<int64_t>(kMaxTokens, tokens - t0));
      int64_t o = o0;
      if (dot4 && nt > 1)  // decode: four weight streams measured no faster (tg32 41.6 vs 42.6 t/s)
        for (; o + 4 <= o1; o += 4) {
          dot4(wb + o * rb, rb, a + t0 * kb, kb, nt, k, out4);
          for (int j = 0; j < nt; ++j)
            for (int r = 0; r < 4; ++r) y[(t0 + j) * m + o + r] = out4[j * 4 + r];
        }
      for (; o < o1; ++o) {
        dot_q(wb + o * rb, a + t0 * kb, kb, nt, k, out);
        for (int j = 0; j < nt; ++j) y[(t0 + j) * m + o] = out[j];
      }
    }
  });
}

// Block weights on AMX tiles from kAmxMinTokens tokens on (the measured crossover).
bool takes_amx(int32_t w_dtype, Isa isa, int64_t tokens) {
  return isa == Isa::Amx && minfer_dtype_info(w_dtype).is_quantized && tokens >= kAmxMinTokens;
}

void run_matmul(const minfer_node &n, const RunCtx &ctx) {
  const minfer_tensor &w = *n.inputs[0];
  matmul_rows(w.dtype, ptr(w), w.shape[0], w.shape[1], ptr<float>(*n.inputs[1]), sdk::run_rows(*n.inputs[1], ctx.args),
              ptr<float>(*n.output), ctx);
}

}  // namespace

void matmul_rows(int32_t dtype, const uint8_t *wb, int64_t k, int64_t m, const float *x, int64_t tokens, float *y, const RunCtx &ctx) {
  if (takes_amx(dtype, ctx.isa, tokens)) return amx_matmul(dtype, wb, sdk::row_bytes(dtype, k), k, m, x, tokens, y, ctx.pool);
  if (QDotFn q = qdot_for(dtype, ctx.isa)) return matmul_quantized(dtype, wb, k, m, x, tokens, y, ctx, q);
  const int64_t rb = sdk::row_bytes(dtype, k);
  ctx.pool.run(m, [&](int64_t o0, int64_t o1, int) {
    std::vector<float> row(dtype == MINFER_DTYPE_F32 ? 0 : size_t(k));
    for (int64_t o = o0; o < o1; ++o) {
      const float *wr = reinterpret_cast<const float *>(wb + o * rb);
      if (dtype != MINFER_DTYPE_F32) {
        decode_row_f32(dtype, wb + o * rb, row.data(), k);
        wr = row.data();
      }
      for (int64_t t = 0; t < tokens; ++t) y[t * m + o] = dot(wr, x + t * k, k);
    }
  });
}

std::string weight_known(const minfer_node &n) {
  const int32_t dt = n.inputs[0]->dtype;
  if (dt == MINFER_DTYPE_F32 || dt == MINFER_DTYPE_F16 || dt == MINFER_DTYPE_BF16 || sdk::visit_block_dtype(dt, [](auto) {}))
    return "";
  return std::string("no decoder for ") + minfer_dtype_name(dt);
}

namespace {

const CpuOp kOps[] = {
    {MINFER_OP_MATMUL, weight_known, run_matmul},
};

}  // namespace

std::span<const CpuOp> matmul_ops() { return kOps; }

std::string explain_matmul(const minfer_node &n, Isa isa, int64_t tokens) {
  const int32_t dt = n.inputs[0]->dtype;
  if (n.op == MINFER_OP_MATMUL_ID) tokens = 1;  // a decode token's expert reads one row per expert
  const std::string type = minfer_dtype_name(dt);
  if (takes_amx(dt, isa, tokens)) return "amx bf16 tiles (" + type + " weights decoded to bf16 panels, f32 accumulators)";
  if (qdot_for(dt, isa))  // AMX machines run the few-token steps on the AVX-512 VNNI kernels
    return std::string(isa_name(isa == Isa::Amx ? Isa::Avx512Vnni : isa)) + " int8 dot products on the " + type + " blocks (activations rounded to 8 bits)";
  return dt == MINFER_DTYPE_F32 ? "f32 dot products" : "f32 dot products (" + type + " rows decoded to f32)";
}

}  // namespace minfer::cpu
