// core/runtime/session.hpp — a graph made runnable: placed, memory-planned, weights uploaded,
// segments compiled (all at build), then run as often as needed.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/run_config.hpp"
#include "graph/graph.hpp"
#include "runtime/placement.hpp"

namespace minfer {

class Session {
 public:
  // Builds everything; throws minfer::Error naming the node/backend for any problem.
  // `backends` must outlive the session.
  Session(const Graph &graph, const RunConfig &cfg, BackendSet &backends);
  ~Session();

  void set_input(const std::string &name, const void *data, uint64_t bytes);
  void run();  // runs every step in order, then waits for all backends
  std::vector<uint8_t> output(const std::string &name) const;

  const Placement &placement() const { return placement_; }
  std::string explain() const;  // the placement report of --explain

 private:
  struct Location {
    DeviceBuffer *buffer = nullptr;
    uint64_t offset = 0;
  };
  struct BackendMemory {
    std::unique_ptr<DeviceBuffer> weights, activations;
    uint64_t weight_bytes = 0, activation_bytes = 0, unshared_bytes = 0;
  };
  using Key = std::pair<TensorId, std::string>;  // a tensor as it exists on one backend

  void plan_memory();
  void upload_weights();
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
  int64_t step_counter_ = 0;
};

}  // namespace minfer
