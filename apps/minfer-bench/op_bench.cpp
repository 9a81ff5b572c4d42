// apps/minfer-bench/op_bench.cpp — one op on one backend, timed alone: `minfer-bench --op matmul|attention`.
// A kernel's speed without a model around it (no graph of other nodes, no host work between
// calls), for tuning the matmul paths shape by shape: a 7B gate projection at 512 tokens is
// --type q4_0 -k 3584 --rows 18944 --tokens 512.
#include "op_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
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

constexpr int64_t kColdBytes = int64_t(512) << 20, kMaxCopies = 64;

// Copies enough to read kColdBytes between two calls on the same one (at most kMaxCopies).
int64_t cold_copies(int64_t requested, size_t bytes) {
  return requested > 0 ? requested : std::clamp<int64_t>((kColdBytes + int64_t(bytes) - 1) / int64_t(bytes), 1, kMaxCopies);
}

// The node's backend, or an error naming why it does not run the node.
BackendHandle &backend_for(BackendSet &backends, const RunConfig &cfg, const Graph &g, const Node &node) {
  BackendHandle &backend = *backends.at(cfg.backends.front().name);
  AbiNode probe(g, node);
  const SupportAnswer s = backend.supports(probe.node());
  if (!s.yes) throw Error("backend '" + cfg.backends.front().name + "' does not run this " + g.tensor(node.output).name + ": " + s.why);
  return backend;
}

// `copies` copies of the node, each compiled as a segment of its own with the buffers
// bind(desc, copy) gives it; a warm-up call of each, then reps calls queued back to back, copy
// after copy: the mean seconds a call.
template <class Bind>
double time_copies(BackendHandle &backend, const Graph &g, const Node &node, int64_t copies, int64_t reps, Bind &&bind) {
  std::vector<std::unique_ptr<AbiNode>> descs;
  std::vector<std::unique_ptr<CompiledSegment>> segs;
  for (int64_t c = 0; c < copies; ++c) {
    descs.push_back(std::make_unique<AbiNode>(g, node));
    bind(*descs.back(), c);
    segs.push_back(backend.compile({&descs.back()->node()}));
  }
  for (auto &seg : segs) backend.execute(*seg, 0, {});
  backend.synchronize();
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < reps; ++i) backend.execute(*segs[size_t(i % int64_t(segs.size()))], 0, {});
  backend.synchronize();
  return std::chrono::duration<double>(Clock::now() - t0).count() / double(reps);
}

// One sequence's `tokens` new tokens over a paged cache already `depth` positions deep, as a
// model's step gives them (pages in order, slot 0); each copy of the caches its own node.
OpBenchResult attention_bench(const OpBenchSpec &spec, const RunConfig &cfg) {
  if (spec.heads < 1 || spec.kv_heads < 1 || spec.heads % spec.kv_heads || spec.head_dim < 1)
    throw Error("--heads must be a multiple of --kv-heads, both >= 1, and --head-dim >= 1");
  if (spec.depth < 0) throw Error("-d must be >= 0");
  const int32_t kv_dtype = spec.kv_type == "f16" ? MINFER_DTYPE_F16 : spec.kv_type == "f32" ? MINFER_DTYPE_F32 : -1;
  if (kv_dtype < 0) throw Error("--kv-type " + spec.kv_type + ": f16 or f32");
  const int64_t page = cfg.kv_page_size;  // positions a page, as the run config sets them (its parser checks: a power of two)
  const int64_t hd = spec.head_dim, kvd = spec.kv_heads * hd, positions = spec.depth + spec.tokens;
  const int64_t pages = (positions + page - 1) / page;

  GraphBuilder b;
  const TensorId q = b.input("q", MINFER_DTYPE_F32, {spec.heads * hd, spec.tokens}), k = b.input("k", MINFER_DTYPE_F32, {kvd, spec.tokens}),
                 v = b.input("v", MINFER_DTYPE_F32, {kvd, spec.tokens});
  const TensorId kc = b.input("k_cache", kv_dtype, {kvd, pages * page}), vc = b.input("v_cache", kv_dtype, {kvd, pages * page});
  const TensorId pos = b.input("positions", MINFER_DTYPE_I32, {spec.tokens}), slot = b.input("slots", MINFER_DTYPE_I32, {spec.tokens}),
                 table = b.input("page_table", MINFER_DTYPE_I32, {pages, 1});
  minfer_attention_params p{};
  p.struct_size = sizeof(p), p.head_dim = int32_t(hd), p.n_head = int32_t(spec.heads), p.n_kv_head = int32_t(spec.kv_heads);
  p.scale = 1.0f / std::sqrt(float(hd)), p.page_size = int32_t(page);
  b.mark_output(b.attention("attention", q, k, v, kc, vc, pos, slot, table, p));
  const Graph g = b.finish();
  const Node &node = g.nodes().at(0);
  BackendSet backends = open_backends(cfg);
  BackendHandle &backend = backend_for(backends, cfg, g, node);

  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  const auto upload = [&](const void *bytes, size_t n) {
    bufs.push_back(backend.alloc(n));
    bufs.back()->write(0, bytes, n);
    return bufs.back()->raw();
  };
  const auto upload_values = [&](int32_t dtype, int64_t rows, int64_t row_len, uint32_t seed) {
    const std::vector<uint8_t> bytes = random_values(dtype, rows, row_len, 1.0f, seed);
    return upload(bytes.data(), bytes.size());
  };
  std::vector<int32_t> positions_v(static_cast<size_t>(spec.tokens)), slots_v(static_cast<size_t>(spec.tokens), 0), table_v(static_cast<size_t>(pages));
  for (int64_t t = 0; t < spec.tokens; ++t) positions_v[size_t(t)] = int32_t(spec.depth + t);
  for (int64_t i = 0; i < pages; ++i) table_v[size_t(i)] = int32_t(i);
  minfer_buffer *const shared[] = {upload_values(MINFER_DTYPE_F32, spec.tokens, spec.heads * hd, 1), upload_values(MINFER_DTYPE_F32, spec.tokens, kvd, 2),
                                   upload_values(MINFER_DTYPE_F32, spec.tokens, kvd, 3), nullptr, nullptr,
                                   upload(positions_v.data(), positions_v.size() * 4), upload(slots_v.data(), slots_v.size() * 4),
                                   upload(table_v.data(), table_v.size() * 4)};
  bufs.push_back(backend.alloc(g.tensor(node.output).n_bytes()));
  minfer_buffer *const out = bufs.back()->raw();
  const size_t cache_bytes = size_t(dtype_bytes(kv_dtype, kvd * pages * page, "benchmark cache"));
  const int64_t copies = cold_copies(spec.copies, 2 * cache_bytes);
  const double seconds = time_copies(backend, g, node, copies, spec.reps, [&](AbiNode &desc, int64_t c) {
    for (int i = 0; i < 8; ++i) desc.input(i).buffer = shared[i] ? shared[i] : upload_values(kv_dtype, pages * page, kvd, uint32_t(10 + 2 * c + i));
    desc.output().buffer = out;
  });
  OpBenchResult r;
  r.backend = cfg.backends.front().name;
  r.us_per_call = seconds * 1e6;
  r.weight_bytes = 2.0 * double(kvd * positions) * double(minfer_dtype_info(kv_dtype).block_bytes);
  r.weight_gbps = r.weight_bytes / seconds / 1e9;
  r.copies = copies;
  return r;
}

}  // namespace

OpBenchResult run_op_bench(const OpBenchSpec &spec, const RunConfig &cfg) {
  if (spec.op != "matmul" && spec.op != "attention")
    throw Error("--op " + spec.op + ": matmul and attention are measured alone so far (whole models: -m MODEL.gguf)");
  if (spec.tokens < 1 || spec.reps < 1) throw Error("--tokens and -r must be >= 1");
  if (cfg.backends.empty()) throw Error(cfg.source + ": no backend to measure");
  if (spec.op == "attention") return attention_bench(spec, cfg);
  if (spec.k < 1 || spec.rows < 1) throw Error("-k and --rows must be >= 1");
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

  BackendSet backends = open_backends(cfg);
  BackendHandle &backend = backend_for(backends, cfg, g, node);

  // Weights as a model's (N(0, 0.02)), activations of unit scale; one node (and segment) per
  // weight copy, all reading the same x into the same y.
  const std::vector<uint8_t> w_data = random_values(dtype, spec.rows, spec.k, 0.02f, 1);
  const std::vector<uint8_t> x_data = random_values(MINFER_DTYPE_F32, spec.tokens, spec.k, 1.0f, 2);
  const int64_t copies = cold_copies(spec.copies, w_data.size());
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  const auto upload = [&](const std::vector<uint8_t> &bytes) {
    bufs.push_back(backend.alloc(bytes.size()));
    bufs.back()->write(0, bytes.data(), bytes.size());
    return bufs.back()->raw();
  };
  minfer_buffer *x_buf = upload(x_data);
  bufs.push_back(backend.alloc(g.tensor(node.output).n_bytes()));
  minfer_buffer *y_buf = bufs.back()->raw();
  const double seconds = time_copies(backend, g, node, copies, spec.reps, [&](AbiNode &desc, int64_t) {
    desc.input(0).buffer = upload(w_data);
    desc.input(1).buffer = x_buf;
    desc.output().buffer = y_buf;
  });

  OpBenchResult r;
  r.backend = cfg.backends.front().name;
  r.us_per_call = seconds * 1e6;
  r.tops = 2.0 * double(spec.k) * double(spec.rows) * double(spec.tokens) / seconds / 1e12;
  r.weight_bytes = double(w_data.size());
  r.copies = copies;
  r.weight_gbps = r.weight_bytes / seconds / 1e9;
  return r;
}

}  // namespace minfer::bench
