// core/runtime/session.hpp — a graph made runnable: placed, memory-planned, weights uploaded,
// segments compiled (all at build), then run as often as needed.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/run_config.hpp"
#include "graph/graph.hpp"
#include "runtime/placement.hpp"
#include "trace/trace.hpp"

namespace minfer {

class Session {
 public:
  // Builds everything; throws minfer::Error naming the node/backend for any problem.
  // `backends` must outlive the session.
  // trace: when given, every node runs as its own segment so each can be timed and its
  // output summarized (slower; for looking inside a run). It must outlive the session.
  // progress: told the fraction of weight bytes copied to backends so far, with the tensor.
  Session(const Graph &graph, const RunConfig &cfg, BackendSet &backends, Trace *trace = nullptr,
          std::function<void(double, const std::string &)> progress = {});
  ~Session();

  // For an input with a token dim, bytes may cover fewer tokens than the maximum: as many as
  // the next run's n_tokens. The bytes reach the backends with the next run (one write each).
  void set_input(const std::string &name, const void *data, uint64_t bytes);
  // Runs every step in order, then waits for all backends (StepShape: its tokens, output rows
  // and sequences; all 0 = the graph's full shapes).
  void run(const StepShape &shape = {});
  // An output's bytes (for a token-dim output, as many tokens as the last run had).
  std::vector<uint8_t> output(const std::string &name) const;
  // The same bytes straight into dst (output_bytes of them): no intermediate copy, for the
  // per-token logits.
  uint64_t output_bytes(const std::string &name) const;
  bool has_output(const std::string &name) const;
  void read_output(const std::string &name, void *dst, uint64_t bytes) const;
  // Output `name` of the next run into dst (at most capacity bytes; output_bytes of them after
  // it): copied within the run where the backend can (ABI 1.10 buffer_read_async, queued
  // before the run's wait, so the per-step logits come back in the same wait), else read right
  // after the wait. For the next run only.
  void read_output_after_next_run(const std::string &name, void *dst, uint64_t capacity);
  // Host memory to read output `name` into: that of the backend holding it (CUDA:
  // page-locked, a step's logits in a quarter of the time), else ordinary.
  HostMemory output_host_memory(const std::string &name, uint64_t bytes) const;
  // Rows [first, first + count) of a token-dim output after the last run (a few sequences'
  // logits of a step whose other rows need only their arg-max), into dst.
  void read_output_rows(const std::string &name, int64_t first, int64_t count, void *dst) const;
  int64_t max_tokens() const { return max_tokens_; }  // the largest n_tokens a run accepts
  int64_t max_outputs() const { return max_outputs_; }  // the largest n_outputs (0: no output rows)

  const Placement &placement() const { return placement_; }
  std::string explain() const;  // the placement report of --explain
  std::string explain_kernels() const;  // its part that the backends write (ABI 1.3)

 private:
  TensorId output_id(const std::string &name) const;  // a graph output's id, else an error naming it
  struct Location {
    DeviceBuffer *buffer = nullptr;
    uint64_t offset = 0;
  };
  struct BackendMemory {
    std::unique_ptr<DeviceBuffer> weights, states, activations, inputs;
    std::vector<std::unique_ptr<DeviceBuffer>> mapped;  // weights used in place from host memory
    uint64_t weight_bytes = 0, mapped_bytes = 0, state_bytes = 0, activation_bytes = 0, unshared_bytes = 0, input_bytes = 0;
    // The inputs region's host copy; set_input writes here and marks the span run() uploads.
    std::vector<uint8_t> input_mirror;
    uint64_t inputs_dirty_begin = UINT64_MAX, inputs_dirty_end = 0;
  };
  using Key = std::pair<TensorId, std::string>;  // a tensor as it exists on one backend

  void open_group();  // the ranks of split: tensor, when the graph has all-reduces
  void plan_memory();
  void upload_weights();
  void zero_states();
  uint64_t bytes_for(const Tensor &t, const StepShape &s) const;  // bytes in a step of that shape
  void compile_segments();
  const Location &at(TensorId t, const std::string &backend) const;

  const Graph &graph_;
  RunConfig cfg_;
  BackendSet &backends_;
  Placement placement_;
  std::map<Key, Location> where_;
  std::map<std::string, BackendMemory> memory_;
  std::vector<std::unique_ptr<CompiledSegment>> segments_;  // by step; null for copies
  std::vector<uint8_t> staging_;                             // host bounce for copies
  std::unique_ptr<BackendGroup> group_;                      // split: tensor's ranks
  int64_t step_counter_ = 0;
  int64_t max_tokens_ = 0;   // 0 when no tensor follows the token count
  int64_t max_outputs_ = 0;
  StepShape last_{};  // the last run's
  struct PendingRead {
    TensorId id;
    void *dst;
    uint64_t capacity;
  };
  std::vector<PendingRead> pending_reads_;  // read_output_after_next_run's, for the next run
  Trace *trace_ = nullptr;
  std::function<void(double, const std::string &)> progress_;
};

}  // namespace minfer
