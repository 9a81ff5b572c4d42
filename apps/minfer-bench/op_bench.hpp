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
  // Copies of the weight the calls rotate over (0: enough for 512 MB, at most 64), so each
  // call reads its weight from memory: one weight called again and again stays in the
  // caches where it fits (a 7B gate's 38 MB in an H100's 50 MB L2) and measures them.
  int64_t copies = 0;
};

struct OpBenchResult {
  std::string backend;
  double us_per_call = 0;
  double tops = 0;          // 2 * k * rows * tokens per second, in 10^12
  double weight_bytes = 0;  // the weight as stored
  double weight_gbps = 0;   // weight bytes per second, in 10^9: the figure for one token
  int64_t copies = 1;       // weight copies the calls rotated over
};

// Runs spec.op on the config's first backend (device and options as configured): a warm-up
// call per weight copy, then spec.reps calls queued back to back, copy after copy; the mean
// time per call.
OpBenchResult run_op_bench(const OpBenchSpec &spec, const RunConfig &cfg);

}  // namespace minfer::bench
