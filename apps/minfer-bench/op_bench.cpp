// apps/minfer-bench/op_bench.cpp — one op on one backend, timed alone: `minfer-bench --op matmul`.
// A kernel's speed without a model around it (no graph of other nodes, no host work between
// calls), for tuning the matmul paths shape by shape: a 7B gate projection at 512 tokens is
// --type q4_0 -k 3584 --rows 18944 --tokens 512.
#include "op_bench.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <cstdio>
#include <random>
#include <vector>

#include "common/error.hpp"
#include "graph/graph.hpp"
#include "minfer/dtype.h"
#include "quant/quantize.hpp"
#include "quant/type_policy.hpp"
#include "runtime/placement.hpp"

namespace minfer::bench {
namespace {

// rows x row_len values of N(0, sd) in `dtype` (quantized from f32 for the block types).
std::vector<uint8_t> random_values(int32_t dtype, int64_t rows, int64_t row_len, float sd, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> f(size_t(rows * row_len));
  for (float &v : f) v = dist(rng);
  std::vector<uint8_t> out(dtype_bytes(dtype, rows * row_len, "benchmark input"));
  quant::quantize_rows(dtype, f.data(), out.data(), rows, row_len, 0);
  return out;
}

}  // namespace

OpBenchResult run_op_bench(const OpBenchSpec &spec, const RunConfig &cfg) {
  if (spec.op != "matmul") throw Error("--op " + spec.op + ": only matmul is measured alone so far; use --op matmul (whole models: -m MODEL.gguf)");
  if (spec.k < 1 || spec.rows < 1 || spec.tokens < 1 || spec.reps < 1) throw Error("-k, --rows, --tokens and -r must be >= 1");
  if (cfg.backends.empty()) throw Error(cfg.source + ": no backend to measure");
  const quant::FileType ft = quant::parse_file_type(spec.type);
  if (ft.medium_mix) throw Error("--type " + spec.type + " is a mix of types for a whole file; name one type (" + quant::file_type_names() + ")");
  const int32_t dtype = ft.base;
  if (spec.k % minfer_dtype_info(dtype).block_values)
    throw Error("-k " + std::to_string(spec.k) + " is not a multiple of " + spec.type + "'s " +
                std::to_string(minfer_dtype_info(dtype).block_values) + "-value blocks");

  GraphBuilder b;
  const TensorId w = b.input("w", dtype, {spec.k, spec.rows}), x = b.input("x", MINFER_DTYPE_F32, {spec.k, spec.tokens});
  b.mark_output(b.matmul("matmul", w, x));
  const Graph g = b.finish();
  const Node &node = g.nodes().at(0);

  const std::string backend_name = cfg.backends.front().name;
  BackendSet backends = open_backends(cfg);
  BackendHandle &backend = *backends.at(backend_name);
  {
    AbiNode probe(g, node);
    const SupportAnswer s = backend.supports(probe.node());
    if (!s.yes) throw Error("backend '" + backend_name + "' does not run this matmul: " + s.why);
  }

  // Weights as a model's (N(0, 0.02)), activations of unit scale; one node (and segment) per
  // weight copy, all reading the same x into the same y.
  const std::vector<uint8_t> w_data = random_values(dtype, spec.rows, spec.k, 0.02f, 1);
  const std::vector<uint8_t> x_data = random_values(MINFER_DTYPE_F32, spec.tokens, spec.k, 1.0f, 2);
  constexpr int64_t kColdBytes = int64_t(512) << 20, kMaxCopies = 64;
  const int64_t copies = spec.copies > 0 ? spec.copies : std::clamp<int64_t>((kColdBytes + int64_t(w_data.size()) - 1) / int64_t(w_data.size()), 1, kMaxCopies);
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  const auto upload = [&](const std::vector<uint8_t> &bytes) {
    bufs.push_back(backend.alloc(bytes.size()));
    bufs.back()->write(0, bytes.data(), bytes.size());
    return bufs.back()->raw();
  };
  minfer_buffer *x_buf = upload(x_data);
  bufs.push_back(backend.alloc(g.tensor(node.output).n_bytes()));
  minfer_buffer *y_buf = bufs.back()->raw();
  std::vector<std::unique_ptr<AbiNode>> descs;
  std::vector<std::unique_ptr<CompiledSegment>> segs;
  for (int64_t c = 0; c < copies; ++c) {
    descs.push_back(std::make_unique<AbiNode>(g, node));
    descs.back()->input(0).buffer = upload(w_data);
    descs.back()->input(1).buffer = x_buf;
    descs.back()->output().buffer = y_buf;
    segs.push_back(backend.compile({&descs.back()->node()}));
  }

  // Warm-up (first-call set-up, clocks), then reps calls queued back to back.
  for (auto &seg : segs) backend.execute(*seg, 0, {});
  backend.synchronize();
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < spec.reps; ++i) backend.execute(*segs[size_t(i % copies)], 0, {});
  backend.synchronize();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count() / double(spec.reps);

  OpBenchResult r;
  r.backend = backend_name;
  r.us_per_call = seconds * 1e6;
  r.tops = 2.0 * double(spec.k) * double(spec.rows) * double(spec.tokens) / seconds / 1e12;
  r.weight_bytes = double(w_data.size());
  r.copies = copies;
  r.weight_gbps = r.weight_bytes / seconds / 1e9;
  return r;
}

}  // namespace minfer::bench
