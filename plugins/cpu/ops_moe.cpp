// plugins/cpu/ops_moe.cpp — mixture-of-experts routing and the expert matmul.
//
// MATMUL_ID groups a step's (row, choice) pairs by expert, so each chosen expert's weights
// are read once for all the rows routed to it (a prompt) and an unchosen one not at all (a
// decode token reads k of n_expert); the groups run as one pass over the experts' panels where
// compile put them in panels (panels.hpp), else on the row kernels of MATMUL.
#include <cmath>
#include <vector>

#include "cpu_backend.hpp"
#include "amx_matmul.hpp"
#include "panels.hpp"
#include "thread_pool.hpp"
#include "minfer/op_contract.hpp"

namespace minfer::cpu {
namespace {

std::string any(const minfer_node &) { return ""; }

// The k largest of each row, largest first; of equal values the lower index first; NaN last.
void run_top_k(const minfer_node &n, const RunCtx &ctx) {
  const float *x = ptr<float>(*n.inputs[0]);
  int32_t *out = ptr<int32_t>(*n.output);
  const int64_t d = n.inputs[0]->shape[0], k = n.output->shape[0], rows = sdk::run_rows(*n.inputs[0], ctx.args);
  ctx.pool.run(rows, [&](int64_t r0, int64_t r1, int) {
    std::vector<uint8_t> taken(static_cast<size_t>(d));
    for (int64_t r = r0; r < r1; ++r) {
      const float *v = x + r * d;
      std::fill(taken.begin(), taken.end(), 0);
      for (int64_t j = 0; j < k; ++j) {
        int64_t best = -1;
        for (int64_t i = 0; i < d; ++i) {
          if (taken[size_t(i)]) continue;
          if (best < 0 || (!std::isnan(v[i]) && (std::isnan(v[best]) || v[i] > v[best]))) best = i;
        }
        taken[size_t(best)] = 1;
        out[r * k + j] = int32_t(best);
      }
    }
  });
}

void run_moe_weights(const minfer_node &n, const RunCtx &ctx) {
  const auto &p = sdk::params_of<minfer_moe_weights_params>(n);
  const float *logits = ptr<float>(*n.inputs[0]);
  const int32_t *ids = ptr<int32_t>(*n.inputs[1]);
  float *out = ptr<float>(*n.output);
  const int64_t ne = n.inputs[0]->shape[0], k = n.inputs[1]->shape[0], rows = sdk::run_rows(*n.inputs[1], ctx.args);
  for (int64_t r = 0; r < rows; ++r) {
    const float *l = logits + r * ne;
    float mx = -INFINITY;
    for (int64_t i = 0; i < ne; ++i) mx = std::max(mx, l[i]);
    double all = 0, chosen = 0;
    for (int64_t i = 0; i < ne; ++i) all += std::exp(double(l[i] - mx));
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[r * k + j];
      if (e < 0 || e >= ne)
        throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, "expert id " + std::to_string(e) + " of row " + std::to_string(r) + " is outside 0.." + std::to_string(ne - 1));
      chosen += std::exp(double(l[e] - mx));
    }
    const double denom = p.normalize ? chosen : all;
    for (int64_t j = 0; j < k; ++j) out[r * k + j] = float(std::exp(double(l[ids[r * k + j]] - mx)) / denom * p.scale);
  }
}

void run_matmul_id(const minfer_node &n, const RunCtx &ctx) {
  const minfer_tensor &w = *n.inputs[0], &x = *n.inputs[1], &ids_t = *n.inputs[2];
  const int64_t kin = w.shape[0], m = w.shape[1], ne = w.shape[2], k = ids_t.shape[0], rows = sdk::run_extent(ids_t, 1, ctx.args);
  const bool per_pair = x.rank == 3;
  const int32_t *ids = ptr<int32_t>(ids_t);
  const float *xs = ptr<float>(x);
  float *out = ptr<float>(*n.output);
  const uint64_t expert_bytes = uint64_t(sdk::row_bytes(w.dtype, kin)) * uint64_t(m);
  // Pairs grouped by expert (a counting sort, stable: row order within an expert).
  thread_local std::vector<int64_t> begin, pairs;
  thread_local std::vector<float> xg, yg;
  begin.assign(size_t(ne + 1), 0);
  pairs.resize(size_t(rows * k));
  for (int64_t i = 0; i < rows * k; ++i) {
    const int32_t e = ids[i];
    if (e < 0 || e >= ne)
      throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, "expert id " + std::to_string(e) + " of row " + std::to_string(i / k) + " is outside 0.." + std::to_string(ne - 1));
    ++begin[size_t(e) + 1];
  }
  for (int64_t e = 0; e < ne; ++e) begin[size_t(e + 1)] += begin[size_t(e)];
  {
    std::vector<int64_t> fill(begin.begin(), begin.end() - 1);
    for (int64_t i = 0; i < rows * k; ++i) pairs[size_t(fill[size_t(ids[i])]++)] = i;
  }
  // The x rows in expert order, then every chosen expert in one pass where the integer
  // kernels run them (else one matmul_rows each), then the results back to their pairs.
  const int64_t n_pairs = rows * k;
  xg.resize(size_t(n_pairs * kin));
  yg.resize(size_t(n_pairs * m));
  for (int64_t i = 0; i < n_pairs; ++i) {
    const float *src = xs + (per_pair ? pairs[size_t(i)] : pairs[size_t(i)] / k) * kin;
    std::copy(src, src + kin, xg.data() + i * kin);
  }
  if (const uint8_t *panels = weight_panels(w, ctx)) {  // each expert's rows are whole panels (plan_panels)
    const ActBlock *a = quantize_tokens(xg.data(), n_pairs, kin, ctx.pool, ctx.isa);
    thread_local std::vector<PanelSegment> psegs;
    psegs.clear();
    for (int64_t e = 0; e < ne; ++e) {
      const int64_t c = begin[size_t(e + 1)] - begin[size_t(e)], at = begin[size_t(e)];
      if (takes_amx(w.dtype, ctx.isa, c))  // a prompt's busy expert: on the tiles, as a dense matmul would be
        amx_matmul(w.dtype, panels + uint64_t(e) * expert_bytes, sdk::row_bytes(w.dtype, kin), kin, m, xg.data() + at * kin, c,
                   yg.data() + at * m, ctx.pool, true);
      else if (c)
        psegs.push_back({panels + uint64_t(e) * expert_bytes, at, c, yg.data() + at * m});
    }
    panel_matmul(w.dtype, ctx.isa, kin, m, a, psegs, ctx.pool);
  } else {
    thread_local std::vector<MatmulSegment> segs;
    segs.clear();
    for (int64_t e = 0; e < ne; ++e)
      if (const int64_t c = begin[size_t(e + 1)] - begin[size_t(e)])
        segs.push_back({ptr(w) + uint64_t(e) * expert_bytes, c, yg.data() + begin[size_t(e)] * m});
    if (!matmul_segments(w.dtype, kin, m, xg.data(), segs, ctx))
      for (const MatmulSegment &sg : segs) {
        const int64_t at = (sg.y - yg.data()) / m;
        matmul_rows(w.dtype, sg.w, kin, m, xg.data() + at * kin, sg.tokens, sg.y, ctx);
      }
  }
  for (int64_t i = 0; i < n_pairs; ++i) std::copy(yg.data() + i * m, yg.data() + (i + 1) * m, out + pairs[size_t(i)] * m);
}

void run_moe_sum(const minfer_node &n, const RunCtx &ctx) {
  const float *y = ptr<float>(*n.inputs[0]), *wts = ptr<float>(*n.inputs[1]);
  float *out = ptr<float>(*n.output);
  const int64_t d = n.output->shape[0], k = n.inputs[0]->shape[1], rows = sdk::run_rows(*n.output, ctx.args);
  for (int64_t r = 0; r < rows; ++r) {
    float *o = out + r * d;
    for (int64_t i = 0; i < d; ++i) o[i] = 0;
    for (int64_t j = 0; j < k; ++j) {
      const float wj = wts[r * k + j], *yj = y + (r * k + j) * d;
      for (int64_t i = 0; i < d; ++i) o[i] += wj * yj[i];
    }
  }
}

const CpuOp kOps[] = {
    {MINFER_OP_TOP_K, any, run_top_k},
    {MINFER_OP_MOE_WEIGHTS, any, run_moe_weights},
    {MINFER_OP_MATMUL_ID, weight_known, run_matmul_id},
    {MINFER_OP_MOE_SUM, any, run_moe_sum},
};

}  // namespace

std::span<const CpuOp> moe_ops() { return kOps; }

}  // namespace minfer::cpu
