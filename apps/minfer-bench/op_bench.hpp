// apps/minfer-bench/op_bench.hpp — timing one op alone on one backend (minfer-bench --op).
#pragma once

#include <cstdint>
#include <string>

#include "config/run_config.hpp"

namespace minfer::bench {

struct OpBenchSpec {
  std::string op = "matmul";
  std::string type = "q4_0";  // the weight dtype
  int64_t k = 4096, rows = 4096, tokens = 1;
  int64_t reps = 20;
};

struct OpBenchResult {
  std::string backend;
  double us_per_call = 0;
  double tops = 0;          // 2 * k * rows * tokens per second, in 10^12
  double weight_bytes = 0;  // the weight as stored
  double weight_gbps = 0;   // weight bytes per second, in 10^9: the figure for one token
};

// Runs spec.op on the config's first backend (device and options as configured): three
// warm-up calls, then spec.reps calls queued back to back; the mean time per call.
OpBenchResult run_op_bench(const OpBenchSpec &spec, const RunConfig &cfg);

}  // namespace minfer::bench
