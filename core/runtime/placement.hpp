// core/runtime/placement.hpp — which backend runs each node, decided once at build time.
//
// Rules (first match wins, glob over node names), else `split: layer` (the layers divided in
// order among the devices), else the default backend; under `split: tensor` each node runs on
// its rank's device. Every node asks
// its backend `supports`; a "no" fails the build with the node, op, dtypes, backend and the
// backend's reason. There is no fallback. Where a tensor crosses backends a copy is inserted.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "graph/graph.hpp"
#include "runtime/plugin.hpp"

namespace minfer {

// The opened backends of a session, by name.
using BackendSet = std::map<std::string, std::unique_ptr<BackendHandle>>;

// Opens every backend the config lists (plugins found through plugin_search_dirs).
BackendSet open_backends(const RunConfig &cfg);

// One step of execution: a contiguous run of nodes on one backend, a copy between two, or
// the ALL_REDUCE nodes of every rank (split: tensor), run together as one collective.
struct Step {
  enum class Kind { Segment, Copy, AllReduce } kind = Kind::Segment;
  std::string backend;       // Segment: who runs it; Copy: destination; AllReduce: rank 0's
  std::vector<NodeId> nodes; // Segment; AllReduce: one node per rank, rank order
  TensorId tensor = -1;      // Copy: the tensor moved
  std::string from;          // Copy: source backend
};

struct Placement {
  std::vector<std::string> node_backend;  // by NodeId
  std::vector<Step> steps;                // in execution order
  // Backend where each Intermediate tensor is produced (its home); "" for weights and inputs.
  std::vector<std::string> home;
};

// Throws minfer::Error for a node its backend does not support.
Placement place(const Graph &g, const RunConfig &cfg, BackendSet &backends);

// The outputs of a segment's nodes that only nodes of that same segment read — not another
// segment, a copy or the host (graph outputs). They are passed to the backend marked
// MINFER_TENSOR_SEGMENT_LOCAL, so it may fuse their producers into their readers.
std::set<TensorId> segment_local_outputs(const Graph &g, const std::vector<NodeId> &segment);

}  // namespace minfer
