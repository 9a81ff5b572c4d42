// plugins/cpu/ops_attention.cpp — causal grouped-query attention over a KV cache.
//
// Writes this step's K and V into the caches (rounded to f16 for an f16 cache), then each
// (token, head) pair computes softmax(q.K^T * scale) V over positions 0..n_past+t, reading
// K and V back from the cache so both cache types see exactly what later steps will see.
#include <cmath>
#include <vector>

#include "cpu_backend.hpp"
#include "minfer/decode.hpp"
#include "minfer/op_contract.hpp"
#include "thread_pool.hpp"

namespace minfer::cpu {
namespace {

std::string any(const minfer_node &) { return ""; }

template <class T>
float load(const T *p, int64_t i);
template <>
float load<float>(const float *p, int64_t i) { return p[i]; }
template <>
float load<uint16_t>(const uint16_t *p, int64_t i) { return sdk::half_to_float(p[i]); }

template <class T>
void attend(const minfer_node &n, const RunCtx &ctx) {
  const auto &p = sdk::params_of<minfer_attention_params>(n);
  const float *q = ptr<float>(*n.inputs[0]), *k = ptr<float>(*n.inputs[1]), *v = ptr<float>(*n.inputs[2]);
  T *kc = ptr<T>(*n.inputs[3]), *vc = ptr<T>(*n.inputs[4]);
  float *out = ptr<float>(*n.output);
  const int64_t tokens = sdk::run_rows(*n.inputs[0], ctx.args), n_past = ctx.args.n_past;
  const int64_t hd = p.head_dim, kvd = int64_t(p.n_kv_head) * hd, n_ctx = n.inputs[3]->shape[1];
  if (n_past < 0 || n_past + tokens > n_ctx)
    throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, "positions " + std::to_string(n_past) + ".." + std::to_string(n_past + tokens - 1) +
                                                      " do not fit the KV cache of " + std::to_string(n_ctx));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < kvd; ++i) {
      const int64_t at = (n_past + t) * kvd + i;
      if constexpr (sizeof(T) == 2) {
        kc[at] = sdk::float_to_half(k[t * kvd + i]);
        vc[at] = sdk::float_to_half(v[t * kvd + i]);
      } else {
        kc[at] = k[t * kvd + i];
        vc[at] = v[t * kvd + i];
      }
    }
  const int64_t group = p.n_head / p.n_kv_head;
  ctx.pool.run(tokens * p.n_head, [&](int64_t w0, int64_t w1, int) {
    std::vector<float> score(static_cast<size_t>(n_past + tokens)), acc(static_cast<size_t>(hd));
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t t = w / p.n_head, h = w % p.n_head, kvh = h / group, last = n_past + t;
      const float *qv = q + (t * p.n_head + h) * hd;
      float mx = -INFINITY;
      for (int64_t j = 0; j <= last; ++j) {
        float s = 0;
        for (int64_t d = 0; d < hd; ++d) s += qv[d] * load(kc, j * kvd + kvh * hd + d);
        score[size_t(j)] = s * p.scale;
        mx = std::max(mx, score[size_t(j)]);
      }
      float sum = 0;
      for (int64_t j = 0; j <= last; ++j) sum += score[size_t(j)] = std::exp(score[size_t(j)] - mx);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j <= last; ++j)
        for (int64_t d = 0; d < hd; ++d) acc[size_t(d)] += score[size_t(j)] * load(vc, j * kvd + kvh * hd + d);
      for (int64_t d = 0; d < hd; ++d) out[(t * p.n_head + h) * hd + d] = acc[size_t(d)] / sum;
    }
  });
}

void run_attention(const minfer_node &n, const RunCtx &ctx) {
  if (n.inputs[3]->dtype == MINFER_DTYPE_F16) attend<uint16_t>(n, ctx);
  else attend<float>(n, ctx);
}

const CpuOp kOps[] = {
    {MINFER_OP_ATTENTION, any, run_attention},
};

}  // namespace

std::span<const CpuOp> attention_ops() { return kOps; }

}  // namespace minfer::cpu
