// apps/minfer-bench/op_bench.hpp — timing one op alone on one backend (minfer-bench --op).
#pragma once

#include <cstdint>
#include <string>

#include "config/run_config.hpp"

namespace minfer::bench {

// matmul: y (tokens x rows) = W (rows x k, of `type`) x (tokens x k). attention: `tokens`
// consecutive tokens of one sequence whose cache (of `kv_type`) already holds `depth`
// positions, heads / kv_heads query / KV heads of head_dim values (a decode step at depth d:
// --tokens 1 -d d).
struct OpBenchSpec {
  std::string op = "matmul";
  std::string type = "q4_0";  // the weight dtype
  int64_t k = 4096, rows = 4096, tokens = 1;
  int64_t heads = 14, kv_heads = 2, head_dim = 64, depth = 4096;
  std::string kv_type = "f16";
  int64_t reps = 20;
  // Copies of the weight (attention: of the KV cache) the calls rotate over (0: enough for
  // 512 MB, at most 64), so each call reads it from memory: one weight called again and
  // again stays in the caches where it fits (a 7B gate's 38 MB in an H100's 50 MB L2) and
  // measures them.
  int64_t copies = 0;
};

struct OpBenchResult {
  std::string backend;
  double us_per_call = 0;
  double tops = 0;          // matmul: 2 * k * rows * tokens per second, in 10^12
  double weight_bytes = 0;  // the weight as stored (attention: the K and V positions a call reads)
  double weight_gbps = 0;   // those bytes per second, in 10^9: the figure for one token
  int64_t copies = 1;       // weight (cache) copies the calls rotated over
};

// Runs spec.op on the config's first backend (device and options as configured): a warm-up
// call per copy, then spec.reps calls queued back to back, copy after copy; the mean time per
// call.
OpBenchResult run_op_bench(const OpBenchSpec &spec, const RunConfig &cfg);

}  // namespace minfer::bench
