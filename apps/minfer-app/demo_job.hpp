// apps/minfer-app/demo_job.hpp — the foundation demo: a small graph of the first op families.
#pragma once

#include "config/run_config.hpp"
#include "graph/graph.hpp"

namespace minfer::app {

// tokens -> embedding gather (table of cfg.table_type) -> bias add -> silu gate -> residual
// -> f16, plus the table dequantized to f16 when it is a block type.
Graph build_demo_graph(const DemoConfig &cfg);

}  // namespace minfer::app

namespace minfer {
class Session;
namespace app {
// Runs the session's graph, prints the result and checks it against the core reference.
// Returns the process exit code (0 = every output matches the reference).
int run_demo(Session &session, const Graph &graph, const RunConfig &cfg);
}  // namespace app
}  // namespace minfer
