// core/trace/trace.hpp — recording what a run did, for the viewer (viz/index.html).
//
// One JSON file: the graph (nodes, ops, shapes, dtypes, edges), the placement (backend per
// node, copies), and per step: each node's time and output statistics (min, max, mean, std,
// NaN/Inf counts, a small down-sampled grid for a heatmap) and, for decode steps, the top-k
// tokens with their probabilities and the one chosen. Nothing is collected unless tracing is
// on. Bounded: at most kMaxSteps steps, grids of at most kGrid x kGrid cells, and grids only
// for the first kGridSteps steps (docs/TRACE.md).
#pragma once

#include "common/json.hpp"
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace minfer {

struct Placement;

class Trace {
 public:
  static constexpr int kMaxSteps = 64;
  static constexpr int kGrid = 16;
  static constexpr int kGridSteps = 4;
  static constexpr int kTopK = 10;

  explicit Trace(std::string path) : path_(std::move(path)) {}

  // The path from the run config's `trace:` or, when empty, MINFER_TRACE; "" = no tracing.
  static std::string path_from(const std::string &config_value);

  void set_model(const std::string &name, const std::string &arch, const std::string &config) {
    model_ = name, arch_ = arch, config_ = config;
  }
  void set_graph(const Graph &g, const Placement &p);

  // A step starts; node results follow in execution order.
  void begin_step(int64_t n_tokens, int64_t n_past);
  bool recording() const { return recording_; }
  // Node `node` ran for `ms`; out holds its output's bytes for this step (f32 or f16 get
  // statistics; other dtypes only the time).
  // device_clock: ms came from the backend's own clock (CUDA events, the CPU's wall time),
  // not the host's around a synchronize.
  void node(NodeId node, double ms, bool device_clock, const Tensor &t, const std::vector<uint8_t> &out);
  void end_step(double total_ms);
  // The sampler's view of the step's logits and its choice (decode steps and the prefill).
  void sample(const float *logits, int64_t n_vocab, int32_t chosen, const std::vector<std::string> &texts);

  void write() const;  // to path(); throws minfer::Error on I/O failure
  const std::string &path() const { return path_; }

 private:
  struct Stats {
    double min = 0, max = 0, mean = 0, std = 0;
    int64_t nan = 0, inf = 0, count = 0;
    int grid_rows = 0, grid_cols = 0;
    std::vector<float> grid;
  };
  struct NodeRecord {
    NodeId id;
    double ms;
    bool device_clock;
    bool has_stats;
    Stats stats;
  };
  struct Candidate {
    int32_t id;
    double p;
    std::string text;
  };
  struct Step {
    int64_t n_tokens = 0, n_past = 0;
    double total_ms = 0;
    std::vector<NodeRecord> nodes;
    bool sampled = false;
    int32_t chosen = -1;
    std::vector<Candidate> top;
  };

  std::string path_, model_, arch_, config_;
  json::Json graph_;
  std::vector<Step> steps_;
  bool recording_ = false;   // the current step is kept (not past kMaxSteps)
  int64_t dropped_steps_ = 0;
};

}  // namespace minfer
