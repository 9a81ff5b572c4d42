#include "demo_job.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "minfer/dtype.h"
#include "quant/reference.hpp"
#include "reference/ops.hpp"
#include "runtime/session.hpp"

namespace minfer::app {
namespace {

// Deterministic, smooth values a person can eyeball: no RNG, same on every machine.
std::vector<float> demo_table(int64_t vocab, int64_t dim) {
  std::vector<float> v(size_t(vocab * dim));
  for (int64_t r = 0; r < vocab; ++r)
    for (int64_t c = 0; c < dim; ++c)
      v[size_t(r * dim + c)] = std::sin(0.37f * float(r) + 0.11f * float(c)) * (1.0f + float(r % 3)) / 3.0f;
  return v;
}

HostBytes own(std::vector<uint8_t> bytes) {
  auto keep = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  return {keep->data(), keep->size(), keep};
}

}  // namespace

Graph build_demo_graph(const DemoConfig &cfg) {
  const std::vector<float> table = demo_table(cfg.vocab, cfg.dim);
  std::vector<uint8_t> bytes;
  int32_t dtype = MINFER_DTYPE_F32;
  if (cfg.table_type == "q8_0") {
    dtype = MINFER_DTYPE_Q8_0;
    bytes = quant::quantize_q8_0(table.data(), int64_t(table.size()));
  } else if (cfg.table_type == "f16") {
    dtype = MINFER_DTYPE_F16;
    bytes.resize(table.size() * 2);
    for (size_t i = 0; i < table.size(); ++i) {
      const uint16_t h = quant::f32_to_f16(table[i]);
      std::memcpy(&bytes[2 * i], &h, 2);
    }
  } else {
    bytes.resize(table.size() * 4);
    std::memcpy(bytes.data(), table.data(), bytes.size());
  }
  std::vector<uint8_t> bias(size_t(cfg.dim) * 4);
  for (int64_t c = 0; c < cfg.dim; ++c) {
    const float b = 0.02f * float(c % 8) - 0.05f;
    std::memcpy(&bias[size_t(c) * 4], &b, 4);
  }

  GraphBuilder gb;
  const TensorId tok_embd = gb.weight("token_embd.weight", dtype, {cfg.dim, cfg.vocab}, own(std::move(bytes)));
  const TensorId b = gb.weight("demo.bias", MINFER_DTYPE_F32, {cfg.dim}, own(std::move(bias)));
  const TensorId ids = gb.input("tokens", MINFER_DTYPE_I32, {int64_t(cfg.tokens.size())});
  const TensorId emb = gb.get_rows("demo.embed", tok_embd, ids);
  const TensorId h = gb.add_row_broadcast("demo.bias_add", emb, b);
  const TensorId g = gb.silu("demo.silu", h);
  const TensorId y = gb.mul("demo.gate", g, h);
  const TensorId z = gb.add("demo.residual", y, emb);
  gb.mark_output(gb.convert("demo.out_f16", z, MINFER_DTYPE_F16));
  if (minfer_dtype_info(dtype).is_quantized) gb.mark_output(gb.dequantize("demo.table_f16", tok_embd));
  return gb.finish();
}

int run_demo(Session &session, const Graph &graph, const RunConfig &cfg) {
  const DemoConfig &d = cfg.demo;
  std::vector<uint8_t> ids(d.tokens.size() * 4);
  std::memcpy(ids.data(), d.tokens.data(), ids.size());
  session.set_input("tokens", ids.data(), ids.size());
  session.run();

  const auto ref = reference::evaluate(graph, {{"tokens", ids}});
  std::printf("minfer demo: %zu rows gathered from a %lld x %lld %s table, placed by %s\n",
              d.tokens.size(), (long long)d.vocab, (long long)d.dim, d.table_type.c_str(),
              cfg.source.c_str());
  std::printf("  out = f16(silu(embed + bias) * (embed + bias) + embed)\n");
  int exit_code = 0;
  for (const auto &[name, want] : ref) {
    const std::vector<uint8_t> got = session.output(name);
    const TensorId id = graph.find_tensor(name);
    const Tensor &t = graph.tensor(id);
    const int64_t n = t.n_elements(), row = t.shape[0];
    double max_err = 0;
    for (int64_t i = 0; i < n; ++i) {
      uint16_t a, b;
      std::memcpy(&a, &got[size_t(2 * i)], 2);
      std::memcpy(&b, &want[size_t(2 * i)], 2);
      max_err = std::fmax(max_err, std::fabs(quant::f16_to_f32(a) - quant::f16_to_f32(b)));
    }
    if (name == "demo.out_f16") {
      for (int64_t r = 0; r < t.shape[1]; ++r) {
        std::printf("  row %3d:", d.tokens[size_t(r)]);
        for (int64_t c = 0; c < std::min<int64_t>(row, 8); ++c) {
          uint16_t h;
          std::memcpy(&h, &got[size_t(2 * (r * row + c))], 2);
          std::printf(" %8.4f", quant::f16_to_f32(h));
        }
        std::printf("%s\n", row > 8 ? "  ..." : "");
      }
    }
    // Backends may round silu's exp differently from the reference: one f16 step of slack.
    const double tol = 2e-3;
    const bool ok = max_err <= tol;
    exit_code |= ok ? 0 : 1;
    std::printf("  %-15s %s: max |backend - reference| = %.3g over %lld values -> %s\n",
                name.c_str(), t.describe().c_str() + name.size() + 1, max_err, (long long)n,
                ok ? "OK" : "MISMATCH");
  }
  return exit_code;
}

}  // namespace minfer::app
